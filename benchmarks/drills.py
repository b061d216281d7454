"""Failure drills with measurements (DESIGN.md §5): `citadel bench hedge`, `citadel bench breaker`,
`citadel drill permissions`. This module orchestrates them: the drill config and credentials, the
loopback-only clusters (serving.ray.local) or in-process services; the HTTP load, faults and
reports of hedge and breaker are loadtests.drills.

- hedge: split topology, 3 fixed retriever replicas, one made ~10x slower; healthy vs slow without
  hedging vs slow with hedging (both with latency-aware routing), plus hedging alone and neither
  (Serve's stock routing); p50/p99 of /v1/retrieve and the extra requests the hedges cost.
- breaker: the generator slowed to 6 s mid-run; when its breaker tripped, p95 per 10 s window, the
  staged return after the fault is removed, and 5xx count.
- permissions (in-process, no HTTP, no Ray): the permission store fails under load; every response
  must be a 503 `permissions_unavailable` or carry only passages that passed a live check (counted
  from the trace log); the reranker failing must leave answers flowing with `degraded`.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import secrets
import threading
import time
import uuid

from benchmarks.serve_bench import Identity, bench_config
from citadel.config import CitadelConfig
from citadel.errors import CitadelError
from citadel.identity.credentials import ALL_TENANTS, add_credential
from loadtests.drills.breaker import breaker_drill
from loadtests.drills.control import clear_fault, set_fault
from loadtests.drills.hedge import HEDGE_CASES, added_latency_ms, hedge_case, hedge_report
from loadtests.drills.workload import ANSWER_QUESTION, RETRIEVE_QUERIES, RETRIEVE_TOP_K

HEDGE_REPLICAS = 3


def drill_config(config: CitadelConfig) -> tuple[CitadelConfig, str, str]:
    """bench_config plus fault injection on, an admin credential and a metrics credential of the
    drill's own; returns (config, admin token, metrics token)."""
    config = bench_config(config)
    config.serving.fault_injection = True
    metrics_token = secrets.token_hex(32)
    config.serving.metrics_tokens_sha256 = [*config.serving.metrics_tokens_sha256,
                                            hashlib.sha256(metrics_token.encode()).hexdigest()]
    # fault injection is platform-wide, so the drill's admin is a platform (all-tenant) admin
    admin = add_credential(config.credentials_path, f"drill-admin-{uuid.uuid4().hex[:6]}", [ALL_TENANTS], admin=True)
    return config, admin, metrics_token


# ---------------------------------------------------------------------- hedge
def bench_hedge(config: CitadelConfig, concurrency: int, duration_s: float, warmup_s: float, log=print) -> dict:
    from serving.ray.local import APP_NAME, serve_locally
    from serving.ray.status import lowest_replica_rank

    config, admin, metrics = drill_config(config)
    config.serving.topology = "split"
    retriever = config.serving.deployments["retriever"]
    retriever.min_replicas = retriever.max_replicas = HEDGE_REPLICAS
    identity = Identity(config)

    # A fresh cluster per case: replica ranks start at 0 again and no routing state carries over.
    rows: list[dict] = []
    slow_ms = 0.0
    for name, hedging, outlier_routing in HEDGE_CASES:  # "healthy" first: it sets slow_ms
        config.resilience.hedge_enabled = hedging
        config.resilience.outlier_routing = outlier_routing
        with serve_locally(config) as url:
            if name != "healthy":
                rank = lowest_replica_rank("retriever", APP_NAME)
                set_fault(url, admin, "retriever", latency_ms=slow_ms, replicas=[rank])
            rows.append(hedge_case(url, metrics, identity.headers, name, concurrency, warmup_s, duration_s, slow_ms))
            log(rows[-1])
            if name == "healthy":
                slow_ms = added_latency_ms(rows[-1])
            else:
                clear_fault(url, admin, "retriever")
    return hedge_report(rows, slow_ms, concurrency)


# ---------------------------------------------------------------------- breaker
def bench_breaker(config: CitadelConfig, concurrency: int, before_s: float, fault_s: float, after_s: float,
                  slow_ms: float, slo_ms: float, log=print) -> dict:
    from serving.ray.local import serve_locally

    config, admin, metrics = drill_config(config)
    identity = Identity(config)
    with serve_locally(config) as url:
        return breaker_drill(url, admin, metrics, identity.headers, concurrency, before_s, fault_s, after_s,
                             slow_ms, slo_ms, log)


# ---------------------------------------------------------------------- permissions
PERMISSION_PHASES = ("healthy", "permissions_down", "reranker_failing")
FAULT_STORE_READ_S = 0.6  # a little over the fault store's read interval: the fault is seen by then
RECOVERY_TIMEOUT_S = 120.0
RECOVERY_POLL_S = 0.2


class _TraceCapture(logging.Handler):
    """Collects the retriever's live-check spans (chunk ids that passed a live check)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.checked: set[str] = set()
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            span = json.loads(record.getMessage())
        except ValueError:
            return
        if span.get("stage") == "live_check":
            with self._lock:
                self.checked.update(span.get("chunk_ids", []))


def drill_permissions(config: CitadelConfig, concurrency: int, phase_s: float, log=print) -> dict:
    """In-process services under load: permission store down, then the reranker failing."""
    from citadel.resilience.faults import FaultSpec
    from citadel.resilience.process import fault_store
    from serving.services.compose import build_services

    config, _, _ = drill_config(config)
    identity = Identity(config)
    capture = _TraceCapture()
    trace = logging.getLogger("citadel.trace")
    trace.addHandler(capture)
    trace.setLevel(logging.INFO)
    services = build_services(config)
    answers = services.query.answers
    # A working reranker first (the default is none, which reports every answer as rerank_skipped).
    # Set bare: the answer service itself fails open around the reranker, which is what is drilled.
    answers.reranker = _KeepOrderReranker()
    store = fault_store(config)
    outcomes: list[dict] = []
    try:
        _load_phase(services, identity, "healthy", concurrency, phase_s, outcomes)
        store.set(FaultSpec(stage="catalog", error_rate=1.0))
        time.sleep(FAULT_STORE_READ_S)
        _load_phase(services, identity, "permissions_down", concurrency, phase_s, outcomes)
        store.clear("catalog")
        recovered_s = _wait_for_catalog(services, identity)
        log({"event": "catalog breaker closed again", "after_s": recovered_s})
        answers.reranker = _FailingReranker()
        _load_phase(services, identity, "reranker_failing", concurrency, phase_s, outcomes)
    finally:
        trace.removeHandler(capture)
        services.wiring.raw_catalog.close()
    report = _permissions_report(outcomes, capture.checked, log)
    report["catalog_breaker_closed_after_s"] = recovered_s
    return report


def _load_phase(services, identity: Identity, phase: str, concurrency: int, phase_s: float,
                outcomes: list[dict]) -> None:
    """`concurrency` callers alternating retrieve and answer for `phase_s`; one outcome per request."""
    lock = threading.Lock()
    stop_at = time.monotonic() + phase_s

    def load(worker: int) -> None:
        caller = identity.caller(services, worker)
        turn = worker
        while time.monotonic() < stop_at:
            turn += 1
            outcome = {"phase": phase, **_one_request(services, caller, turn)}
            with lock:
                outcomes.append(outcome)

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(load, range(concurrency)))


def _one_request(services, caller, turn: int) -> dict:
    """A retrieve on odd turns, an answer on even ones: the chunks it returned, or its error code."""
    try:
        if turn % 2:
            query = RETRIEVE_QUERIES[turn % len(RETRIEVE_QUERIES)]
            body = services.query.retrieve(caller, query, RETRIEVE_TOP_K, uuid.uuid4().hex)
            chunks = [p["chunk_id"] for p in body["passages"]]
        else:
            body = services.query.answer(caller, ANSWER_QUESTION, uuid.uuid4().hex)
            chunks = [c["chunk_id"] for c in body["citations"]]
    except CitadelError as error:
        return {"status": error.http_status, "code": error.code, "chunks": []}
    return {"status": 200, "chunks": chunks, "degraded": body.get("degraded", [])}


def _wait_for_catalog(services, identity: Identity) -> float:
    """After the store is back, a trickle of requests lets the catalog breaker probe and return in
    stages (DESIGN.md §5); until it is closed, requests keep failing closed."""
    from citadel.resilience.breaker import BreakerState

    breaker = services.resilience.breakers["catalog"]
    caller = identity.caller(services, 0)
    started = time.monotonic()
    while breaker.state is not BreakerState.CLOSED and time.monotonic() - started < RECOVERY_TIMEOUT_S:
        try:
            services.query.retrieve(caller, RETRIEVE_QUERIES[0], RETRIEVE_TOP_K, uuid.uuid4().hex)
        except CitadelError:
            pass  # failing closed while the breaker is not yet closed: expected, keep probing
        time.sleep(RECOVERY_POLL_S)
    return round(time.monotonic() - started, 1)


class _FailingReranker:
    model_id = "failing-reranker"
    enabled = True

    def rerank(self, question, passages, top_n):
        raise RuntimeError("reranker unavailable (drill)")


class _KeepOrderReranker:
    model_id = "keep-order"
    enabled = True

    def rerank(self, question, passages, top_n):
        return list(passages)[:top_n]


def _permissions_report(outcomes: list[dict], checked: set[str], log) -> dict:
    report = {}
    for phase in PERMISSION_PHASES:
        rows = [o for o in outcomes if o["phase"] == phase]
        passages = [c for o in rows for c in o["chunks"]]
        report[phase] = {
            "responses": len(rows),
            "ok": sum(o["status"] == 200 for o in rows),
            "503_permissions_unavailable": sum(o.get("code") == "permissions_unavailable" for o in rows),
            "other_errors": sum(o["status"] != 200 and o.get("code") != "permissions_unavailable" for o in rows),
            "passages_returned": len(passages),
            "passages_without_live_check": sum(c not in checked for c in passages),
            "degraded_rerank_skipped": sum("rerank_skipped" in o.get("degraded", []) for o in rows),
        }
        log({phase: report[phase]})
    return report
