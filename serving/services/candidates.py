"""The candidate test items' admin endpoints (issue 28 item 7; DESIGN.md §11): list a tenant's queue,
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


class CandidatesService:
    def __init__(self, queue: CandidateQueue):
        self.queue = queue

    def list(self, admin: ServiceIdentity, tenant_id: str, source: str | None = None,
             status: str | None = CANDIDATE_PENDING) -> dict:
        validate_tenant_id(tenant_id)
        require_tenant(admin, tenant_id)
        return {"tenant_id": tenant_id, "candidates": self.queue.list(tenant_id, source, status)}

    def promote(self, admin: ServiceIdentity, candidate_id: int, label: Mapping[str, Any]) -> dict:
        return self.queue.promote(self._visible(admin, candidate_id), label, admin.id)

    def dismiss(self, admin: ServiceIdentity, candidate_id: int) -> dict:
        return self.queue.dismiss(self._visible(admin, candidate_id), admin.id)

    def _visible(self, admin: ServiceIdentity, candidate_id: int) -> dict:
        candidate = self.queue.get(candidate_id)
        if candidate is None or not admin.may_act_for(candidate["tenant_id"]):
            raise NotFound(f"no candidate {candidate_id}")
        return candidate
