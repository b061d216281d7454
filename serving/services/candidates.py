"""The candidate test items' admin endpoints (DESIGN.md §11): list a tenant's queue,
promote an item with the owner's label, dismiss one (citadel/quality/candidates.py).

Admins only, each within its own tenants (`require_tenant`): a candidate of another tenant is 404 like
a missing one, so ids cannot be probed across tenants. Promotions and dismissals are audited by the
catalog in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from citadel.catalog.base import CANDIDATE_PENDING
from citadel.errors import NotFound
from citadel.identity.credentials import ServiceIdentity
from citadel.quality.candidates import CandidateQueue
from citadel.types import validate_tenant_id
from serving.services.access import require_tenant


# Candidates one listing returns by default and at most (an item holds up to ~20 KB of text).
LIST_PAGE, MAX_LIST_PAGE = 100, 500


class CandidatesService:
    def __init__(self, queue: CandidateQueue):
        self.queue = queue

    def list(self, admin: ServiceIdentity, tenant_id: str, source: str | None = None,
             status: str | None = CANDIDATE_PENDING, limit: int = LIST_PAGE, after_id: int = 0) -> dict:
        """A page of the tenant's candidates, oldest first; the next page starts after the last id."""
        validate_tenant_id(tenant_id)
        require_tenant(admin, tenant_id)
        page = self.queue.list(tenant_id, source, status, limit=min(limit, MAX_LIST_PAGE), after_id=after_id)
        return {"tenant_id": tenant_id, "candidates": page}

    def promote(self, admin: ServiceIdentity, candidate_id: int, label: Mapping[str, Any]) -> dict:
        return self.queue.promote(self._visible(admin, candidate_id), label, admin.id)

    def dismiss(self, admin: ServiceIdentity, candidate_id: int) -> dict:
        return self.queue.dismiss(self._visible(admin, candidate_id), admin.id)

    def _visible(self, admin: ServiceIdentity, candidate_id: int) -> dict:
        candidate = self.queue.get(candidate_id)
        if candidate is None or not admin.may_act_for(candidate["tenant_id"]):
            raise NotFound(f"no candidate {candidate_id}")
        return candidate
