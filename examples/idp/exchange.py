"""OAuth 2.0 Token Exchange (RFC 8693) as the example token service does it: no web framework here,
the server (server.py) only parses the request and maps `OAuthError` to a response.

Two exchanges, both by an authenticated client (Citadel's tools service, `tools.service_id`, with its
credential as client secret, HTTP Basic per RFC 6749 §2.3.1):

1. The user's own context (a JWT the gateway verified, `subject_token_type` jwt) for
   - a **delegation** (`requested_token_type` refresh_token): bound to a run (`run_id`), one system
     (`audience`) and the tools named in `scope`, living as long as the run may wait for an approval
     (`expires_in`, capped); only this service accepts it (its `aud` is this issuer);
   - or an **access token** at once.
2. A delegation (`subject_token_type` refresh_token) for an **access token**: the same run, a system
   and tools within the delegation's, five minutes.

The subject must be one this service can verify and that the client could not have made: a context
signed with the client's own key, or naming the client as its service, is refused, so the tools'
credential alone acts for nobody. Every exchange consults the revoked users (users.py): a user who
lost access gets no token, whatever delegation a run still holds. An access token names the user
(`sub`, `tenant`, `groups`), the system (`aud`), the tool (`scope`) and the client as actor (`act`,
RFC 8693 §4.1; `svc`, the service Citadel's verifier binds a context to).
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import jwt

from citadel.config import CitadelConfig
from citadel.errors import CitadelError, Unauthenticated
from citadel.identity.context import MAX_USER_CONTEXT_CHARS, UserContextVerifier
from citadel.identity.credentials import CredentialStore, ServiceIdentity
from citadel.identity.keys import KeyRing
from examples.idp import users
from examples.idp.keys import ALGORITHM, ISSUER, SigningKey

GRANT_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
REFRESH_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:refresh_token"
DELEGATION_USE = "delegation"

ACCESS_TTL_S = 300
MAX_DELEGATION_TTL_S = 8 * 86_400  # a week of approval or review plus a margin; never more
MAX_SCOPES = 32
MAX_BASIC_CHARS = 4096
AUDIENCE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
SCOPE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
RUN_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class OAuthError(Exception):
    """An RFC 6749 §5.2 error: a code the client acts on, and a description that names no internals."""

    def __init__(self, error: str, description: str, status: int = 400):
        super().__init__(description)
        self.error, self.description, self.status = error, description, status


@dataclass(frozen=True)
class Subject:
    """Who a token is for, and the bounds a delegation puts on what may be issued from it."""

    tenant: str
    user: str
    groups: tuple[str, ...]
    run_id: str | None = None  # set when the subject is a delegation
    scopes: frozenset[str] | None = None
    audiences: frozenset[str] | None = None


class TokenService:
    def __init__(self, config: CitadelConfig, key: SigningKey, clock: Callable[[], float] = time.time):
        ident = config.identity
        self.home = Path(config.home)
        self.key, self.clock = key, clock
        self.clients = CredentialStore.from_config(config, clock)
        self.client_ids = frozenset({config.tools.service_id})
        self.leeway_s = ident.leeway_s
        # The users' contexts are verified exactly as Citadel's gateway verifies them.
        self.contexts = UserContextVerifier(KeyRing.from_config(config), ident.audience, ident.max_ttl_s,
                                            ident.leeway_s, clock)

    # ------------------------------------------------------------------------- the token endpoint

    def exchange(self, authorization: str | None, form: Mapping[str, str]) -> dict:
        client = self._client(authorization)
        if form.get("grant_type") != GRANT_TOKEN_EXCHANGE:
            raise OAuthError("unsupported_grant_type", "only token exchange is supported")
        subject_type, token = form.get("subject_token_type"), form.get("subject_token") or ""
        if subject_type == JWT_TYPE:
            subject = self._user_context(token, client)
        elif subject_type == REFRESH_TOKEN_TYPE:
            subject = self._delegation(token, client, form.get("run_id"))
        else:
            raise OAuthError("invalid_request", "subject_token_type must be jwt or refresh_token")
        if users.is_revoked(self.home, subject.tenant, subject.user):
            raise OAuthError("invalid_grant", "the subject may no longer be acted for")
        audience, scopes = _audience(form.get("audience"), subject), _scopes(form.get("scope"), subject)
        requested = form.get("requested_token_type") or ACCESS_TOKEN_TYPE
        if requested == ACCESS_TOKEN_TYPE:
            return self._access_token(subject, client, audience, scopes)
        if requested == REFRESH_TOKEN_TYPE and subject.run_id is None:
            return self._delegation_token(subject, client, audience, scopes, form)
        raise OAuthError("invalid_request", "requested_token_type must be access_token (or refresh_token from "
                                            "the user's own context)")

    def _client(self, authorization: str | None) -> ServiceIdentity:
        """HTTP Basic client authentication: the client id and, as its secret, its Citadel credential."""
        refused = OAuthError("invalid_client", "client authentication failed", 401)
        if not authorization or len(authorization) > MAX_BASIC_CHARS or not authorization.startswith("Basic "):
            raise refused
        try:
            client_id, _, secret = base64.b64decode(authorization[6:].strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise refused from None
        client_id, secret = urllib.parse.unquote_plus(client_id), urllib.parse.unquote_plus(secret)
        try:
            identity = self.clients.authenticate(f"Bearer {secret}")
        except (Unauthenticated, CitadelError):
            raise refused from None
        if identity.id != client_id or client_id not in self.client_ids:
            raise refused
        return identity

    def _user_context(self, token: str, client: ServiceIdentity) -> Subject:
        """The user's own context, verified as the gateway verifies it, for the service it names; never
        one the client made itself (its own key, or itself as the vouching service)."""
        refused = OAuthError("invalid_grant", "the subject token is not a valid user context")
        if len(token) > MAX_USER_CONTEXT_CHARS:
            raise refused
        try:
            vouching = jwt.decode(token, options={"verify_signature": False}).get("svc")
        except jwt.PyJWTError:
            raise refused from None
        if not isinstance(vouching, str) or vouching == client.id:
            raise refused
        try:
            principal = self.contexts.verify(token, ServiceIdentity(vouching))
        except Unauthenticated:
            raise refused from None
        except CitadelError:  # a key file became unreadable: fail closed, details in the server log
            raise OAuthError("temporarily_unavailable", "the token service cannot verify tokens now", 503) from None
        if not client.may_act_for(principal.tenant_id):
            raise refused
        return Subject(principal.tenant_id, principal.user_id, tuple(sorted(principal.groups)))

    def _delegation(self, token: str, client: ServiceIdentity, run_id: str | None) -> Subject:
        """A delegation this service issued to this client, for this run, still live."""
        refused = OAuthError("invalid_grant", "the delegation is not valid for this client and run")
        if len(token) > MAX_USER_CONTEXT_CHARS:
            raise refused
        try:
            if jwt.get_unverified_header(token).get("kid") != self.key.kid:
                raise refused
            claims = jwt.decode(token, self.key.private.public_key(), algorithms=[ALGORITHM], audience=ISSUER,
                                issuer=ISSUER, leeway=self.leeway_s,
                                options={"require": ["exp", "iat", "sub", "aud", "iss"]})
        except jwt.PyJWTError:
            raise refused from None
        actor = claims.get("act")
        if (claims.get("token_use") != DELEGATION_USE or not isinstance(actor, dict) or actor.get("sub") != client.id
                or claims.get("run") != run_id or not isinstance(claims.get("resources"), list)):
            raise refused
        return Subject(claims["tenant"], claims["sub"], tuple(claims["groups"]), claims["run"],
                       frozenset(str(claims.get("scope", "")).split()), frozenset(claims["resources"]))

    # ------------------------------------------------------------------------- what it issues

    def _access_token(self, subject: Subject, client: ServiceIdentity, audience: str, scopes: list[str]) -> dict:
        now = int(self.clock())
        claims = {**self._common(subject, client, now), "aud": audience, "exp": now + ACCESS_TTL_S,
                  "scope": " ".join(scopes), "svc": client.id, "client_id": client.id}
        if subject.run_id is not None:
            claims["run"] = subject.run_id
        return {"access_token": self._sign(claims, "at+jwt"), "issued_token_type": ACCESS_TOKEN_TYPE,
                "token_type": "Bearer", "expires_in": ACCESS_TTL_S, "scope": claims["scope"]}

    def _delegation_token(self, subject: Subject, client: ServiceIdentity, audience: str, scopes: list[str],
                          form: Mapping[str, str]) -> dict:
        run_id = form.get("run_id") or ""
        if not RUN_ID.match(run_id):
            raise OAuthError("invalid_request", "a delegation needs the run_id it is bound to")
        lifetime = _lifetime(form.get("expires_in"))
        now = int(self.clock())
        claims = {**self._common(subject, client, now), "aud": ISSUER, "exp": now + lifetime, "run": run_id,
                  "scope": " ".join(scopes), "resources": [audience], "token_use": DELEGATION_USE}
        return {"access_token": self._sign(claims, "JWT"), "issued_token_type": REFRESH_TOKEN_TYPE,
                "token_type": "N_A", "expires_in": lifetime, "scope": claims["scope"]}

    def _common(self, subject: Subject, client: ServiceIdentity, now: int) -> dict:
        return {"iss": ISSUER, "sub": subject.user, "tenant": subject.tenant, "groups": list(subject.groups),
                "act": {"sub": client.id}, "iat": now, "jti": secrets.token_hex(12)}

    def _sign(self, claims: dict, typ: str) -> str:
        return jwt.encode(claims, self.key.private, algorithm=ALGORITHM, headers={"kid": self.key.kid, "typ": typ})

    # ------------------------------------------------------------------------- the user directory

    def revoke(self, authorization: str | None, tenant: str, user: str) -> None:
        """An admin of the tenant (a Citadel admin credential) marks the user as having lost access."""
        try:
            admin = self.clients.authenticate(authorization)
        except (Unauthenticated, CitadelError):
            raise OAuthError("invalid_client", "admin authentication failed", 401) from None
        if not admin.admin or not admin.may_act_for(tenant):
            raise OAuthError("access_denied", "this credential may not manage that tenant's users", 403)
        users.revoke(self.home, tenant, user)


def _audience(value: str | None, subject: Subject) -> str:
    if not value or not AUDIENCE.match(value):
        raise OAuthError("invalid_target", "name one system as the audience")
    if subject.audiences is not None and value not in subject.audiences:
        raise OAuthError("invalid_target", "the delegation does not cover that audience")
    return value


def _scopes(value: str | None, subject: Subject) -> list[str]:
    scopes = (value or "").split()
    if not scopes or len(scopes) > MAX_SCOPES or not all(SCOPE.match(s) for s in scopes):
        raise OAuthError("invalid_scope", f"name 1-{MAX_SCOPES} tools as the scope")
    if subject.scopes is not None and not set(scopes) <= subject.scopes:
        raise OAuthError("invalid_scope", "the delegation does not cover that scope")
    return sorted(set(scopes))


def _lifetime(value: str | None) -> int:
    try:
        lifetime = int(value) if value else MAX_DELEGATION_TTL_S
    except ValueError:
        raise OAuthError("invalid_request", "expires_in is a whole number of seconds") from None
    if not 0 < lifetime <= MAX_DELEGATION_TTL_S:
        raise OAuthError("invalid_request", f"expires_in is 1-{MAX_DELEGATION_TTL_S} seconds")
    return lifetime
