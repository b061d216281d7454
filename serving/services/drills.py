"""The drills endpoint family (DESIGN.md §5): platform admins set, clear and list injected faults.

Refused unless `serving.fault_injection` is on; every change is audited and logged at WARNING, since
a fault left behind degrades every tenant.
"""

from __future__ import annotations

import logging

from citadel.catalog.base import AuditLog
from citadel.config import AnswerConfig
from citadel.errors import Conflict, Forbidden, InvalidRequest
from citadel.identity.credentials import ServiceIdentity
from citadel.resilience.faults import STAGES, FaultSpec, FaultStore
from serving.services.access import require_platform_admin

log = logging.getLogger(__name__)


class DrillService:
    def __init__(self, faults: FaultStore | None, answer: AnswerConfig, catalog: AuditLog):
        """`faults`: where the deployment's injected faults are kept (None: `serving.fault_injection` is
        off); `answer`: which stages this deployment has (a reranker or none)."""
        self.faults = faults
        self.answer = answer
        self.catalog = catalog

    def _faults(self, admin: ServiceIdentity) -> FaultStore:
        require_platform_admin(admin)
        if self.faults is None:
            raise Forbidden("fault injection is off; enable serving.fault_injection for drills",
                            code="fault_injection_disabled")
        return self.faults

    def stages(self) -> list[str]:
        """The stages this deployment has, so a fault there can change something: no reranker when
        none is configured (every answer already says rerank_skipped, so its drill would test nothing)."""
        absent = {"reranker"} if self.answer.reranker == "none" else set()
        return sorted(STAGES - absent)

    def set_fault(self, admin: ServiceIdentity, spec: dict) -> dict:
        store = self._faults(admin)
        try:
            fault = FaultSpec.model_validate(spec)
        except ValueError as error:
            raise InvalidRequest(str(error)) from None
        if fault.stage not in self.stages():
            raise Conflict(f"this deployment has no {fault.stage} configured: a fault there would change nothing",
                           code="stage_not_deployed")
        saved = store.set(fault)
        self.catalog.audit(admin.id, "fault_set", "-", fault.stage, saved.model_dump())
        log.warning("drill: fault set on %s by %s: %s", fault.stage, admin.id, saved.model_dump())
        return saved.model_dump()

    def clear_fault(self, admin: ServiceIdentity, stage: str) -> dict:
        self._faults(admin).clear(stage)
        self.catalog.audit(admin.id, "fault_clear", "-", stage, {})
        log.warning("drill: fault on %s cleared by %s", stage, admin.id)
        return {"stage": stage, "cleared": True}

    def list_faults(self, admin: ServiceIdentity) -> dict:
        return {"faults": [f.model_dump() for f in self._faults(admin).list()], "stages": self.stages()}
