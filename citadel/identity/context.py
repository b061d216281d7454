"""User contexts: standard JWTs (RFC 7519, PyJWT) in which a calling service, or an identity
provider, vouches for its end user (DESIGN.md §4.1).

Claims: `tenant`, `sub`, `groups`, `iat`, `exp`, `aud` (this deployment), `svc` (the calling service
the context is for), optional `jti`; contexts from an identity provider also carry its `iss`. The
header's `kid` picks the key (citadel/identity/keys.py), and the key, not the header, fixes the
algorithm. Every check fails closed with `Unauthenticated` and a stable `code`, so clients can tell
"refresh your token" from "fix your integration".
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

import jwt

from citadel.errors import Unauthenticated
from citadel.identity.base import MAX_NAME_CHARS, valid_name
from citadel.identity.credentials import ServiceIdentity
from citadel.identity.keys import HS256, KeyRing, ServiceKey, VerificationKey
from citadel.errors import InvalidTenant
from citadel.types import Principal, validate_tenant_id

USER_CONTEXT_HEADER = "x-citadel-user-context"
MAX_GROUPS = 1024  # a context carrying more is a bug or an attack, not an org chart
MAX_USER_CONTEXT_CHARS = 64 * 1024  # bound the decoding done before the signature is checked
REQUIRED_CLAIMS = ["exp", "iat", "aud"]


def sign_user_context(key: ServiceKey, tenant: str, user: str, groups: Iterable[str], ttl_s: int,
                      audience: str, now: float, jti: str | None = None) -> str:
    """A JWT the verifier accepts from `key.service` (its `svc`), signed HS256 under `key.kid`."""
    groups = sorted(set(groups))
    values = [tenant, user, key.service, audience, *groups] + ([jti] if jti is not None else [])
    if not all(valid_name(v) for v in values) or len(groups) > MAX_GROUPS or not _valid_tenant(tenant):
        raise ValueError(f"need a valid tenant id, names of 1-{MAX_NAME_CHARS} characters without control "
                         f"characters and at most {MAX_GROUPS} groups")
    if ttl_s <= 0:
        raise ValueError("ttl_s must be positive")
    iat = int(now)
    claims: dict[str, Any] = {"tenant": tenant, "sub": user, "groups": groups, "iat": iat, "exp": iat + int(ttl_s),
                              "aud": audience, "svc": key.service}
    if jti is not None:
        claims["jti"] = jti
    return jwt.encode(claims, key.secret_bytes, algorithm=HS256, headers={"kid": key.kid})


def _valid_tenant(value: Any) -> bool:
    try:
        validate_tenant_id(value)
    except InvalidTenant:
        return False
    return True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class UserContextVerifier:
    """Finds the key by kid, checks the signature with that key's own algorithm, then lifetime,
    audience, the binding to the calling service, and the claims' shapes."""

    def __init__(self, keys: KeyRing, audience: str, max_ttl_s: int, leeway_s: int,
                 clock: Callable[[], float] = time.time):
        self.keys, self.audience, self.max_ttl_s, self.leeway_s, self._clock = keys, audience, max_ttl_s, leeway_s, clock

    def verify(self, token: str, caller: ServiceIdentity) -> Principal:
        key = self._key_for(token)
        claims = self._authentic_claims(token, key)
        self._check_times(claims)
        self._check_binding(claims, key, caller)
        groups = claims.get("groups")
        valid = (_valid_tenant(claims.get("tenant")) and valid_name(claims.get("sub")) and isinstance(groups, list)
                 and len(groups) <= MAX_GROUPS and all(valid_name(g) for g in groups)
                 and ("jti" not in claims or valid_name(claims["jti"])))
        if not valid:
            raise Unauthenticated("user context claims are missing or malformed", code="invalid_user_context")
        return Principal(claims["tenant"], claims["sub"], frozenset(groups))

    def _key_for(self, token: str) -> VerificationKey:
        malformed = Unauthenticated("user context is not a compact JWT", code="malformed_user_context")
        if not isinstance(token, str) or len(token) > MAX_USER_CONTEXT_CHARS or token.count(".") != 2:
            raise malformed
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as error:
            raise malformed from error
        kid = header.get("kid")
        if not valid_name(kid):
            raise Unauthenticated("user context header names no kid", code="malformed_user_context")
        key = self.keys.find(kid)
        if key is None:
            raise Unauthenticated(f"no key {kid!r}: unknown or retired", code="unknown_key")
        return key

    def _authentic_claims(self, token: str, key: VerificationKey) -> dict:
        options = {"require": [*REQUIRED_CLAIMS, *(["iss"] if key.issuer else [])],
                   # lifetimes are checked below against the injected clock, with the max-TTL rule
                   "verify_exp": False, "verify_iat": False, "verify_nbf": False}
        try:
            # The key's own algorithm, never the header's: `none` or HS256-over-a-public-key cannot pass.
            claims = jwt.decode(token, key.key, algorithms=[key.algorithm], audience=self.audience,
                                issuer=key.issuer, options=options)
        except jwt.InvalidAlgorithmError as error:
            raise Unauthenticated(f"key {key.kid!r} verifies {key.algorithm} only", code="algorithm_not_allowed") from error
        except jwt.InvalidSignatureError as error:
            raise Unauthenticated("user context signature does not verify", code="invalid_signature") from error
        except jwt.InvalidAudienceError as error:
            raise Unauthenticated("user context is for another audience", code="wrong_audience") from error
        except jwt.InvalidIssuerError as error:
            raise Unauthenticated("user context is from another issuer", code="wrong_issuer") from error
        except jwt.DecodeError as error:
            raise Unauthenticated("user context is not a compact JWT", code="malformed_user_context") from error
        except jwt.PyJWTError as error:  # missing or ill-typed registered claims
            raise Unauthenticated(f"user context claims are invalid ({error})", code="invalid_user_context") from error
        if not isinstance(claims, dict):
            raise Unauthenticated("user context payload is not an object", code="malformed_user_context")
        return claims

    def _check_times(self, claims: dict) -> None:
        iat, exp, now = claims.get("iat"), claims.get("exp"), self._clock()
        if not (_is_int(iat) and _is_int(exp)) or exp <= iat:
            raise Unauthenticated("user context needs integer iat < exp", code="invalid_user_context")
        if now > exp + self.leeway_s:
            raise Unauthenticated("user context has expired", code="expired_user_context")
        if iat > now + self.leeway_s or exp - iat > self.max_ttl_s:
            raise Unauthenticated(f"user context issued in the future or living over {self.max_ttl_s}s",
                                  code="invalid_user_context")

    def _check_binding(self, claims: dict, key: VerificationKey, caller: ServiceIdentity) -> None:
        """The context must be for this caller, and signed by a key this caller may use: its own
        HS256 secret, or a provider that lists it. A service's secret never signs for another."""
        key_allows_caller = key.service == caller.id if key.algorithm == HS256 else caller.id in key.services
        if not key_allows_caller:
            raise Unauthenticated(f"key {key.kid!r} does not sign contexts for service {caller.id!r}",
                                  code="user_context_not_bound_to_caller")
        if claims.get("svc") != caller.id:
            raise Unauthenticated("user context was issued to another service", code="user_context_not_bound_to_caller")
