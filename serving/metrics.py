"""Prometheus metrics of the API (DESIGN.md §4 step 8), in a registry per gateway.

The gateway times every stage itself (the stages it runs in-process and the calls it makes to other
deployments), so one replica's registry holds the whole request path; `GET /metrics` serves it.
A registry per instance keeps test apps and benchmark runs from sharing counters.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

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
        self.breaker_transitions = Counter("citadel_breaker_transitions_total", "Breaker state changes.",
                                           ["breaker", "to"], registry=r)
        self._retrievers: list = []
        r.register(_RetrieverCollector(self._retrievers))

    def breaker_transition(self, name: str, old, new, reason: str) -> None:
        self.breaker_transitions.labels(name, getattr(new, "value", str(new))).inc()

    def watch_retriever(self, retriever) -> None:
        """Export a (remote) retriever's hedge and retry counts, if it keeps any."""
        if hasattr(retriever, "stats"):
            self._retrievers.append(retriever)

    def observe_stages(self, timings_ms: dict[str, float]) -> None:
        for stage, ms in timings_ms.items():
            self.stage_latency.labels(stage.removesuffix("_ms")).observe(ms / MS_PER_S)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _RetrieverCollector:
    """Hedged reads, hedges sent and won, and retries, read from the retriever client at scrape time."""

    NAMES = {"requests": "citadel_retriever_reads", "hedges": "citadel_retriever_hedges",
             "hedge_wins": "citadel_retriever_hedge_wins", "retries": "citadel_retriever_retries"}

    def __init__(self, retrievers: list):
        self._retrievers = retrievers

    def collect(self):
        totals: dict[str, int] = {}
        for retriever in self._retrievers:
            for key, value in retriever.stats().items():
                totals[key] = totals.get(key, 0) + int(value)
        for key, value in totals.items():
            family = CounterMetricFamily(self.NAMES.get(key, f"citadel_retriever_{key}"), f"Retriever client {key}.")
            family.add_metric([], value)
            yield family
