"""Serve request router for the retriever: power of two choices, with replicas that are much slower
than their peers ranked last (citadel/resilience/outliers.py).

Why: Serve 2.60 picks replicas by queue length only. A half-alive replica (slow, not failing) keeps
getting its share, and when the gateway's hedge cancels the slow loser, that replica's queue empties
and it looks idle. Timing each request per replica, from send to completion (and counting the age of
requests still in flight), and trying outliers last removes most traffic from such a replica; the
hedge covers the rest. Evidence goes stale after
a few seconds, so a replica that recovers gets traffic again.
"""

from __future__ import annotations

from typing import Any, List, Optional

# The stock router lives under Serve's private path in 2.60 (only its mixins are public).
from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter

from citadel.resilience.outliers import LatencyOutliers

ROUTER_CLASS = "serving.routing:LatencyAwareRouter"


class LatencyAwareRouter(PowerOfTwoChoicesRequestRouter):
    def initialize_state(self, **kwargs: Any) -> None:
        self._outliers = LatencyOutliers(**kwargs)

    async def choose_replicas(self, candidate_replicas: List[Any], pending_request: Optional[Any] = None):
        ranks = await super().choose_replicas(candidate_replicas, pending_request)
        reranked: list[list] = []
        for rank in ranks:
            by_id = {replica.replica_id: replica for replica in rank}
            for ids in self._outliers.rank(list(by_id)):
                reranked.append([by_id[i] for i in ids])
        return reranked

    def on_send_request(self, replica_id: Any) -> None:
        super().on_send_request(replica_id)
        self._outliers.sent(replica_id)

    def on_request_completed(self, replica_id: Any, internal_request_id: str) -> None:
        super().on_request_completed(replica_id, internal_request_id)
        self._outliers.completed(replica_id)

    def on_replica_actor_died(self, replica_id: Any) -> None:
        super().on_replica_actor_died(replica_id)
        self._outliers.forget(replica_id)
