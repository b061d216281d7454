"""Who is calling: the authenticated service and the verified end user, or an admin and its scope.

Identity comes only from the credential and the signed user context (DESIGN.md §7); each admin
action then checks the tenant it touches here, so no endpoint family writes its own scope rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from citadel.errors import Forbidden
from citadel.identity.authenticator import Authenticator
from citadel.identity.credentials import ServiceIdentity
from citadel.types import Principal


@dataclass
class Caller:
    """Who is asking: the authenticated service and the verified end user."""

    service: ServiceIdentity
    principal: Principal
    # The user's own signed context as verified: what a run exchanges for its tools' delegation
    # (citadel/tools/delegation.py); None where no request carried one (the CLI, the review page).
    user_context: str | None = None


class Access:
    def __init__(self, authenticator: Authenticator):
        self.authenticator = authenticator

    def caller(self, authorization: str | None, user_context: str | None) -> Caller:
        """401 before anything else runs; the principal comes only from the signed context."""
        service, principal = self.authenticator.authenticate(authorization, user_context)
        return Caller(service, principal, user_context)

    def admin(self, authorization: str | None) -> ServiceIdentity:
        """An admin credential carrying its scope; each admin action then checks the tenant it touches."""
        return self.authenticator.require_admin(authorization)


def require_tenant(admin: ServiceIdentity, tenant_id: str) -> None:
    """Every admin action on a tenant: a tenant admin acts only in its own tenants."""
    if not admin.may_act_for(tenant_id):
        raise Forbidden(f"admin {admin.id!r} may not act in tenant {tenant_id!r}", code="tenant_not_allowed")


def require_platform_admin(admin: ServiceIdentity) -> None:
    """Platform-wide actions (fault injection affects every tenant): platform admins only."""
    if not admin.platform_admin:
        raise Forbidden(f"admin {admin.id!r} is not a platform (all-tenant) admin", code="platform_admin_required")
