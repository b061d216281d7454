"""Who is calling the CRM, by `tools.delegation` (DESIGN.md §10: tools act on behalf of the user):

- `token_exchange` (the default): `Authorization: Bearer <access token>` issued by the users' token
  service (examples/idp) — signed with its key (JWKS, ES256), from its issuer, for this system
  (`aud` crm), to Citadel's tools service as actor. Verified with Citadel's own user-context code
  over that JWKS alone: a token signed with any service's HS256 key has no key here and is refused.
  The token's `scope` names the tools it was issued for; a write needs its own tool's scope.
- `local_test_hs256`: TEST ONLY. The old pair of headers (a service credential and a context that
  service signed with its own HS256 key), verified against the Citadel home like its gateway does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jwt

from citadel.config import CitadelConfig
from citadel.errors import Unauthenticated
from citadel.identity.authenticator import Authenticator
from citadel.identity.context import UserContextVerifier
from citadel.identity.credentials import ALL_TENANTS, ServiceIdentity
from citadel.identity.keys import KeyRing
from citadel.types import Principal
from examples.idp.keys import provider

AUDIENCE = "crm"  # the system name Citadel's tools use for the CRM (`tools.endpoints.crm`)
MAX_TOKEN_CHARS = 64 * 1024


@dataclass(frozen=True)
class Grant:
    """What an access token allows beyond naming the user: its actor and the tools it was issued for."""

    actor: str
    scopes: frozenset[str]


class AccessTokenVerifier:
    """Bearer access tokens of the token service; `(Grant, Principal)` or `Unauthenticated`."""

    def __init__(self, config: CitadelConfig):
        ident, tools = config.identity, config.tools
        keys = KeyRing(None, [provider(config)])  # the token service's JWKS and nothing else
        keys.find("")  # a missing or broken JWKS fails at startup, not per request
        self._verifier = UserContextVerifier(keys, AUDIENCE, ident.max_ttl_s, ident.leeway_s)
        self._actor = ServiceIdentity(tools.service_id, False, frozenset({ALL_TENANTS}))

    def authenticate(self, authorization: str | None, user_context: str | None = None) -> tuple[Grant, Principal]:
        token = _bearer(authorization)
        principal = self._verifier.verify(token, self._actor)
        claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})  # verified just above
        scope = claims.get("scope")
        if not isinstance(scope, str):
            raise Unauthenticated("the access token names no scope", code="invalid_user_context")
        return Grant(self._actor.id, frozenset(scope.split())), principal


def _bearer(authorization: str | None) -> str:
    parts = (authorization or "").strip().split(None, 1)
    if len(parts) != 2 or parts[0].lower() != "bearer" or len(parts[1]) > MAX_TOKEN_CHARS:
        raise Unauthenticated("an Authorization: Bearer access token is required", code="missing_credential")
    return parts[1].strip()


def verifier_for(config: CitadelConfig):
    if config.tools.delegation == "local_test_hs256":
        return Authenticator.from_config(config)
    return AccessTokenVerifier(config)
