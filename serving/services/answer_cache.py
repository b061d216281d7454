"""The ACL-scoped answer cache as the services see it (DESIGN.md §4, §7): a hit is served only after
the live check, a write never keeps a transient downgrade, and admin writes invalidate what they
change. The cache fails open, visibly (`cache_unavailable`); invalidation failures expire by TTL.
"""

from __future__ import annotations

import logging

from citadel.answer.service import outcome_of
from citadel.catalog.base import PermissionSource
from citadel.config import StateConfig
from citadel.resilience.breaker import BreakerOpen
from citadel.resilience.faults import InjectedFault
from citadel.resilience.guards import Guard
from citadel.state import State
from citadel.state.base import StateUnavailable
from citadel.types import Degradation, Principal
from serving.services.metrics import ApiMetrics

log = logging.getLogger(__name__)

# Failures of the cache store: the answer is computed afresh and says so. A drill's injected fault
# stands for the store failing (the Redis-down drill), so it fails open the same way.
CACHE_FAILURES = (StateUnavailable, BreakerOpen, InjectedFault)


class AnswerCacheView:
    def __init__(self, state_config: StateConfig, catalog: PermissionSource, state: State, metrics: ApiMetrics,
                 guard: Guard | None = None):
        self.enabled = state_config.answer_cache_enabled
        self.catalog = catalog
        self.state = state
        self.metrics = metrics
        self._guard = guard or Guard()

    def get(self, key: str, principal: Principal, degraded: list[str]) -> dict | None:
        """A cached answer, served only if every document it cites is still readable by this
        principal at the cited version (the live check applies to cached passages too)."""
        if not self.enabled:
            return None
        try:
            cached = self._guard.call(self.state.cache.get, key)
        except CACHE_FAILURES:
            degraded.append(Degradation.CACHE_UNAVAILABLE)  # the cache fails open, visibly
            self.metrics.cache.labels("error").inc()
            return None
        if cached is None:
            self.metrics.cache.labels("miss").inc()
            return None
        readable = self.catalog.readable_documents(principal)
        for citation in cached["citations"]:
            current = readable.get(citation["document_id"])
            if current is None or current.version != citation["version"]:
                self.metrics.cache.labels("stale").inc()
                return None
        if "outcome" not in cached:  # written before answers carried their outcome
            cached = {**cached, "outcome": outcome_of(cached["refused"], cached["reason"])}
        return cached

    def put(self, key: str, tenant_id: str, body: dict, degraded: list[str]) -> None:
        if not self.enabled:
            return
        documents = {c["document_id"] for c in body["citations"]}
        value = {k: body[k] for k in ("answer", "outcome", "refused", "reason", "citations")}
        value["bundle_id"] = body.get("bundle_id")  # a hit still names the config bundle that made the answer
        try:
            self._guard.call(self.state.cache.put, key, value, tenant_id, documents)
        except CACHE_FAILURES:
            degraded.append(Degradation.CACHE_UNAVAILABLE)

    def invalidate(self, tenant_id: str, document_ids: list[str] | None = None) -> None:
        """After a write, drop cached answers that used the documents (refusals cite nothing, so
        the tenant's whole cache goes when a document becomes newly visible)."""
        try:
            if document_ids is None:
                self.state.cache.invalidate_tenant(tenant_id)
            else:
                self.state.cache.invalidate_documents(tenant_id, document_ids)
        except StateUnavailable:
            log.warning("answer cache unreachable; entries for %s expire by TTL", tenant_id)
