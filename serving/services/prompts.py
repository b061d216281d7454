"""Reading a kept prompt (GET /v1/admin/prompts/{request_id}): platform admins only, every read audited.

A kept prompt holds a user's question word for word, contact details and all, from any tenant, so
only a platform (all-tenant) admin may read one, and each read is written to the catalog's audit log
(who, when, which request, whose) before the prompt is returned: a read that cannot be audited
returns nothing. A request with no kept prompt (never kept, purged, or not a request) is 404.
"""

from __future__ import annotations

from typing import Any

from citadel.errors import NotFound
from citadel.guardrails.prompt_vault import read_audited
from citadel.identity.credentials import ServiceIdentity
from serving.services.access import require_platform_admin


class PromptReads:
    def __init__(self, vault, catalog):
        """`vault`: the PromptVault (None: prompts are not kept); `catalog`: where reads are audited."""
        self.vault = vault
        self.catalog = catalog

    def read(self, admin: ServiceIdentity, request_id: str) -> dict[str, Any]:
        require_platform_admin(admin)
        kept = read_audited(self.vault, self.catalog, admin.id, request_id, "api") if self.vault else None
        if kept is None:
            raise NotFound("no prompt is kept for this request")
        return kept.to_dict()


def prompt_reads(wiring) -> PromptReads:
    """The reads over a serving process's wiring (its vault and its catalog)."""
    return PromptReads(wiring.prompt_vault, wiring.raw_catalog)
