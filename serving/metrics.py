"""Prometheus metrics of the API (DESIGN.md §4 step 8), in a registry per gateway.

The gateway times every stage itself (the stages it runs in-process and the calls it makes to other
deployments), so one replica's registry holds the whole request path; `GET /metrics` serves it.
A registry per instance keeps test apps and benchmark runs from sharing counters.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

# Stage latencies span a cache hit (~0.1 ms) to a CPU generation (~seconds).
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
MS_PER_S = 1000.0


class ApiMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.stage_latency = Histogram("citadel_stage_latency_seconds", "Latency of one stage of a request.",
                                       ["stage"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.requests = Counter("citadel_requests_total", "API requests by endpoint, tenant and status.",
                                ["endpoint", "tenant", "status"], registry=r)
        self.cache = Counter("citadel_answer_cache_total", "Answer-cache lookups by result.", ["result"], registry=r)
        self.refusals = Counter("citadel_refusals_total", "Refused answers by reason.", ["reason"], registry=r)
        self.degraded = Counter("citadel_degraded_total", "Responses with a visible downgrade, by what.",
                                ["what"], registry=r)
        self.budget_rejections = Counter("citadel_budget_rejections_total", "Requests refused by a user budget.",
                                         ["tenant"], registry=r)

    def observe_stages(self, timings_ms: dict[str, float]) -> None:
        for stage, ms in timings_ms.items():
            self.stage_latency.labels(stage.removesuffix("_ms")).observe(ms / MS_PER_S)

    def render(self) -> bytes:
        return generate_latest(self.registry)
