"""What the gateway calls per request: the service credential first, then the user context bound to
it, then the tenant scope of the credential (DESIGN.md §4.1)."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Callable, Iterator

from citadel.config import CitadelConfig
from citadel.errors import CitadelError
from citadel.errors import Forbidden, Unauthenticated, Unavailable
from citadel.identity.context import USER_CONTEXT_HEADER, UserContextVerifier
from citadel.identity.credentials import CredentialStore, ServiceIdentity
from citadel.identity.keys import KeyRing
from citadel.types import Principal

log = logging.getLogger(__name__)


class Authenticator:
    def __init__(self, credentials: CredentialStore, verifier: UserContextVerifier):
        self.credentials, self.verifier = credentials, verifier

    @classmethod
    def from_config(cls, config: CitadelConfig, clock: Callable[[], float] = time.time) -> Authenticator:
        ident = config.identity
        keys = KeyRing.from_config(config)
        keys.find("")  # load every key source now: a broken JWKS or keys file fails at startup, not per request
        verifier = UserContextVerifier(keys, ident.audience, ident.max_ttl_s, ident.leeway_s, clock)
        return cls(CredentialStore.from_config(config, clock), verifier)

    def authenticate(self, authorization: str | None, user_context: str | None) -> tuple[ServiceIdentity, Principal]:
        with _failing_closed():
            service = self.credentials.authenticate(authorization)
            if not user_context:
                raise Unauthenticated(f"the {USER_CONTEXT_HEADER} header is required", code="missing_user_context")
            principal = self.verifier.verify(user_context, service)
        if not service.may_act_for(principal.tenant_id):
            raise Forbidden(f"service {service.id!r} may not act for tenant {principal.tenant_id!r}",
                            code="tenant_not_allowed")
        return service, principal

    def require_admin(self, authorization: str | None) -> ServiceIdentity:
        """An admin credential; which tenants it may touch is checked by each admin action."""
        with _failing_closed():
            service = self.credentials.authenticate(authorization)
        if not service.admin:
            raise Forbidden(f"service {service.id!r} may not call admin endpoints", code="admin_required")
        return service


@contextlib.contextmanager
def _failing_closed() -> Iterator[None]:
    """A credentials, keys or JWKS file that became unreadable or corrupt refuses every caller
    (503 `identity_unavailable`); its path and parse error go to the server log, not to the caller."""
    try:
        yield
    except (Unauthenticated, Forbidden):
        raise
    except CitadelError as error:
        log.error("identity files unusable, refusing callers: %s", error)
        raise Unavailable("identity store unavailable; see the server log",
                           code="identity_unavailable") from None
