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

import random
from typing import Any, List, Optional

# The stock router lives under Serve's private path in 2.60 (only its mixins are public).
from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter

from citadel.resilience.outliers import LatencyOutliers

ROUTER_CLASS = "serving.ray.routing:LatencyAwareRouter"
POWER_OF_TWO = 2


class LatencyAwareRouter(PowerOfTwoChoicesRequestRouter):
    def initialize_state(self, **kwargs: Any) -> None:
        self._outliers = LatencyOutliers(**kwargs)

    async def choose_replicas(self, candidate_replicas: List[Any], pending_request: Optional[Any] = None):
        ranks = await super().choose_replicas(candidate_replicas, pending_request)
        chosen = [replica for rank in ranks for replica in rank]
        every = {replica.replica_id: replica for replica in [*candidate_replicas, *chosen]}
        slow = self._outliers.outliers(list(every))
        usual = [replica for replica in chosen if replica.replica_id not in slow]
        outliers = [replica for replica in chosen if replica.replica_id in slow]
        if not usual and outliers:
            # Multiplexing narrowed the choice to replicas holding the tenant, all of them slow: any
            # other replica is better (it loads the tenant on its first request).
            others = [replica for rid, replica in every.items() if rid not in slow]
            usual = random.sample(others, min(POWER_OF_TWO, len(others)))
        return [rank for rank in (usual, outliers) if rank]

    def on_send_request(self, replica_id: Any) -> None:
        super().on_send_request(replica_id)
        self._outliers.sent(replica_id)

    def on_request_completed(self, replica_id: Any, internal_request_id: str) -> None:
        super().on_request_completed(replica_id, internal_request_id)
        self._outliers.completed(replica_id)

    def on_replica_actor_died(self, replica_id: Any) -> None:
        super().on_replica_actor_died(replica_id)
        self._outliers.forget(replica_id)
