"""Serve request router for the retriever: power of two choices, with replicas that are much slower
than their peers ranked last (citadel/resilience/outliers.py).

Why: Serve 2.60 picks replicas by queue length only. A half-alive replica (slow, not failing) keeps
getting its share, and when the gateway's hedge cancels the slow loser, that replica's queue empties
and it looks idle. Timing each request per replica, from routing to completion, and trying outliers
last removes most traffic from such a replica; the hedge covers the rest. Evidence goes stale after
a few seconds, so a replica that recovers gets traffic again.
"""

from __future__ import annotations

import time
from typing import Any, List, Optional

# The stock router lives under Serve's private path in 2.60 (only its mixins are public).
from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter

from citadel.resilience.outliers import LatencyOutliers

ROUTER_CLASS = "serving.routing:LatencyAwareRouter"
MS = 1000.0
# Start times of requests that never complete (cancelled before dispatch) are dropped after this.
FORGET_AFTER_S = 300.0
MAX_TRACKED = 10_000


class LatencyAwareRouter(PowerOfTwoChoicesRequestRouter):
    def initialize_state(self, **kwargs: Any) -> None:
        self._outliers = LatencyOutliers(**kwargs)
        self._started: dict[str, float] = {}

    async def choose_replicas(self, candidate_replicas: List[Any], pending_request: Optional[Any] = None):
        ranks = await super().choose_replicas(candidate_replicas, pending_request)
        if pending_request is not None:
            self._remember(pending_request.metadata.internal_request_id)
        reranked: list[list] = []
        for rank in ranks:
            by_id = {replica.replica_id: replica for replica in rank}
            for ids in self._outliers.rank(list(by_id)):
                reranked.append([by_id[i] for i in ids])
        return reranked

    def on_request_completed(self, replica_id: Any, internal_request_id: str) -> None:
        started = self._started.pop(internal_request_id, None)
        if started is not None:
            self._outliers.observe(replica_id, (time.monotonic() - started) * MS)

    def on_replica_actor_died(self, replica_id: Any) -> None:
        super().on_replica_actor_died(replica_id)
        self._outliers.forget(replica_id)

    def _remember(self, request_id: str) -> None:
        now = time.monotonic()
        self._started.setdefault(request_id, now)
        if len(self._started) > MAX_TRACKED:
            self._started = {k: t for k, t in self._started.items() if now - t < FORGET_AFTER_S}
