"""Failure drills with measurements (DESIGN.md §5): `citadel bench hedge`, `citadel bench breaker`,
`citadel drill permissions`. Each starts its own loopback-only cluster (or in-process gateway), drives
load, injects faults through the admin API, and reports JSON.

- hedge: split topology, 3 fixed retriever replicas, one made ~10x slower; healthy vs slow without
  hedging vs slow with hedging (both with latency-aware routing), plus hedging alone and neither
  (Serve's stock routing); p50/p99 of /v1/retrieve and the extra requests the hedges cost.
- breaker: the generator slowed to 6 s mid-run; when its breaker tripped, p95 per 10 s window, the
  staged return after the fault is removed, and 5xx count.
- permissions: the permission store fails under load; every response must be a 503
  `permissions_unavailable` or carry only passages that passed a live check (counted from the trace
  log); the reranker failing must leave answers flowing with `degraded`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import secrets
import threading
import time
import uuid

import httpx

from citadel.config import CitadelConfig
from serving.bench import HTTP_TIMEOUT_S, Identity, LoadRun, bench_config, drive, percentile

RETRIEVE_QUERIES = ["hotel limit per night", "home office equipment", "standard discount", "expense approval",
                    "remote work days", "meal per diem", "lost laptop", "travel booking"]
ANSWER_QUESTION = "What is the hotel limit per night in London?"
ANSWER_TENANT = "acme"  # whose documents answer ANSWER_QUESTION (every request reaches the generator)
HEDGE_REPLICAS = 3
SLOW_FACTOR = 10.0
SLOW_CUT_OF_ADDED = 0.8  # a response slower than 80% of the added latency went through the slow replica
WINDOW_S = 10.0
# The drills read /metrics with a metrics credential of their own, minted per process (drill_config
# adds its digest to the drill cluster's config).
_METRICS_TOKEN = secrets.token_hex(32)


def metric_value(url: str, name: str, labels: str = "") -> float:
    """One sample of the gateway's /metrics (0 when absent)."""
    text = httpx.get(f"{url}/metrics", headers={"authorization": f"Bearer {_METRICS_TOKEN}"},
                     timeout=HTTP_TIMEOUT_S).text
    pattern = re.compile(rf"^{re.escape(name)}{re.escape(labels)}\s+([0-9.eE+-]+)$", re.M)
    return sum(float(m.group(1)) for m in pattern.finditer(text))


def set_fault(url: str, admin_token: str, stage: str, **spec) -> None:
    response = httpx.put(f"{url}/v1/admin/faults/{stage}", json=spec,
                         headers={"authorization": f"Bearer {admin_token}"}, timeout=HTTP_TIMEOUT_S)
    response.raise_for_status()


def clear_fault(url: str, admin_token: str, stage: str) -> None:
    httpx.delete(f"{url}/v1/admin/faults/{stage}", headers={"authorization": f"Bearer {admin_token}"},
                 timeout=HTTP_TIMEOUT_S).raise_for_status()


def drill_config(config: CitadelConfig) -> tuple[CitadelConfig, str]:
    """bench_config plus fault injection on and an admin credential; returns (config, admin token)."""
    from citadel.identity.credentials import ALL_TENANTS, add_credential

    config = bench_config(config)
    config.serving.fault_injection = True
    config.serving.metrics_tokens_sha256 = [*config.serving.metrics_tokens_sha256,
                                            hashlib.sha256(_METRICS_TOKEN.encode()).hexdigest()]
    # fault injection is platform-wide, so the drill's admin is a platform (all-tenant) admin
    return config, add_credential(config.credentials_path, f"drill-admin-{uuid.uuid4().hex[:6]}", [ALL_TENANTS],
                                  admin=True)


# ---------------------------------------------------------------------- hedge
def bench_hedge(config: CitadelConfig, concurrency: int, duration_s: float, warmup_s: float, log=print) -> dict:
    from serving.local import serve_locally

    config, admin = drill_config(config)
    config.serving.topology = "split"
    retriever = config.serving.deployments["retriever"]
    retriever.min_replicas = retriever.max_replicas = HEDGE_REPLICAS
    identity = Identity(config)

    def body(turn: int) -> dict:
        return {"query": RETRIEVE_QUERIES[turn % len(RETRIEVE_QUERIES)], "top_k": 8}

    def case(url: str, name: str) -> dict:
        asyncio.run(drive(url, identity, LoadRun(), "/v1/retrieve", body, concurrency, warmup_s))
        hedges_before = metric_value(url, "citadel_retriever_hedges_total")
        wins_before = metric_value(url, "citadel_retriever_hedge_wins_total")
        retries_before = metric_value(url, "citadel_retriever_retries_total")
        done = asyncio.run(drive(url, identity, LoadRun(), "/v1/retrieve", body, concurrency, duration_s))
        extra = (metric_value(url, "citadel_retriever_hedges_total") - hedges_before
                 + metric_value(url, "citadel_retriever_retries_total") - retries_before)
        ok = [c.latency_ms for c in done if c.status == 200]
        slow_cut = SLOW_CUT_OF_ADDED * slow_ms if slow_ms else float("inf")
        row = {"case": name, "p50_ms": round(percentile(ok, 50), 2), "p99_ms": round(percentile(ok, 99), 2),
               "requests": len(done), "extra_requests": int(extra),
               "hedge_wins": int(metric_value(url, "citadel_retriever_hedge_wins_total") - wins_before),
               "slow_responses": sum(latency > slow_cut for latency in ok),
               "extra_share": round(extra / len(done), 4) if done else 0.0,
               "errors": sum(c.status != 200 for c in done)}
        log(row)
        return row

    # A fresh cluster per case: replica ranks start at 0 again and no routing state carries over.
    rows: list[dict] = []
    slow_ms = 0.0
    for name, hedging, outlier_routing in HEDGE_CASES:
        config.resilience.hedge_enabled = hedging
        config.resilience.outlier_routing = outlier_routing
        with serve_locally(config) as url:
            if name != "healthy":
                set_fault(url, admin, "retriever", latency_ms=slow_ms, replicas=[one_retriever_rank()])
            rows.append(case(url, name))
            if name == "healthy":
                slow_ms = max(rows[0]["p50_ms"], 1.0) * (SLOW_FACTOR - 1)  # added: that replica ~10x slower
            else:
                clear_fault(url, admin, "retriever")
    order = {"healthy": 0, "slow_nohedge": 1, "slow_hedge": 2, "slow_hedge_stock_routing": 3, "slow_stock": 4}
    rows.sort(key=lambda r: order[r["case"]])
    return {"rows": rows, "slow_replica_added_ms": round(slow_ms, 1), "concurrency": concurrency,
            "p99_slow_hedge_vs_healthy": round(rows[2]["p99_ms"] / max(rows[0]["p99_ms"], 1e-9), 3)}


RANK_PROBES = 30
# (case, hedging, latency-aware routing): the three rows, then each mechanism's share.
HEDGE_CASES = (("healthy", True, True), ("slow_hedge", True, True), ("slow_nohedge", False, True),
               ("slow_hedge_stock_routing", True, False), ("slow_stock", False, False))


def one_retriever_rank() -> int:
    """The lowest rank among the live retriever replicas (asked through a Serve handle)."""
    from ray import serve

    from serving.local import APP_NAME

    handle = serve.get_deployment_handle("retriever", app_name=APP_NAME)
    ranks = {handle.rank.remote().result(timeout_s=HTTP_TIMEOUT_S) for _ in range(RANK_PROBES)}
    return min(ranks)


# ---------------------------------------------------------------------- breaker
def bench_breaker(config: CitadelConfig, concurrency: int, before_s: float, fault_s: float, after_s: float,
                  slow_ms: float, slo_ms: float, log=print) -> dict:
    from serving.local import serve_locally

    config, admin = drill_config(config)
    identity = Identity(config)
    run = LoadRun()
    marks: dict[str, float] = {}
    transitions: list[dict] = []
    with serve_locally(config) as url:
        asyncio.run(drive(url, identity, LoadRun(), "/v1/answer", lambda _: {"question": ANSWER_QUESTION},
                          concurrency, 3.0, tenant=ANSWER_TENANT))
        run.started = time.monotonic()
        stop = threading.Event()
        watcher = threading.Thread(target=_watch_breaker, args=(url, run, transitions, stop), daemon=True)
        watcher.start()

        def scenario() -> None:
            time.sleep(before_s)
            set_fault(url, admin, "generator", latency_ms=slow_ms)
            marks["fault_at_s"] = run.since()
            log({"event": "fault set", "t_s": round(marks["fault_at_s"], 1)})
            time.sleep(fault_s)
            clear_fault(url, admin, "generator")
            marks["fault_cleared_s"] = run.since()
            log({"event": "fault cleared", "t_s": round(marks["fault_cleared_s"], 1)})

        director = threading.Thread(target=scenario, daemon=True)
        director.start()
        asyncio.run(drive(url, identity, run, "/v1/answer", lambda _: {"question": ANSWER_QUESTION},
                          concurrency, before_s + fault_s + after_s, keep_bodies=True, tenant=ANSWER_TENANT))
        director.join()
        stop.set()
        watcher.join()
    return _breaker_report(run, marks, transitions, slo_ms)


def _watch_breaker(url: str, run: LoadRun, transitions: list[dict], stop: threading.Event) -> None:
    """Poll the generator breaker's transition counters; note when each one first moves."""
    seen: dict[str, float] = {}
    while not stop.wait(0.5):
        for state in ("open", "half_open", "recovering", "closed"):
            count = metric_value(url, "citadel_breaker_transitions_total", f'{{breaker="generator",to="{state}"}}')
            if count > seen.get(state, 0):
                transitions.append({"t_s": round(run.since(), 1), "to": state, "count": int(count)})
                seen[state] = count


def _breaker_report(run: LoadRun, marks: dict, transitions: list[dict], slo_ms: float) -> dict:
    fault_at = marks.get("fault_at_s", 0.0)
    windows = []
    end = max((c.t_s for c in run.completions), default=0.0)
    start = 0.0
    while start < end:
        inside = [c for c in run.completions if start <= c.t_s < start + WINDOW_S]
        latencies = [c.latency_ms for c in inside if c.status == 200]
        degraded = sum(1 for c in inside if c.body and "generator_fallback" in c.body.get("degraded", []))
        windows.append({"t_s": round(start, 1), "p95_ms": round(percentile(latencies, 95), 1),
                        "requests": len(inside), "fallback_answers": degraded})
        start += WINDOW_S
    tripped = next((t["t_s"] for t in transitions if t["to"] == "open" and t["t_s"] >= fault_at), None)
    recovered = next((w["t_s"] + WINDOW_S for w in windows
                      if w["t_s"] >= fault_at and w["p95_ms"] <= slo_ms and w["requests"]), None)
    return {"slo_ms": slo_ms, "fault_at_s": round(fault_at, 1), "fault_cleared_s": round(marks.get("fault_cleared_s", 0), 1),
            "tripped_at_s": tripped, "recovered_at_s": recovered,
            "recovered_within_s": round(recovered - fault_at, 1) if recovered is not None else None,
            "errors_5xx": sum(c.status >= 500 for c in run.completions), "requests": len(run.completions),
            "windows": windows, "transitions": transitions}


# ---------------------------------------------------------------------- permissions
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
    """In-process gateway under load: permission store down, then the reranker failing."""
    import concurrent.futures

    from citadel.resilience.guards import Guard, GuardedReranker
    from serving.compose import build_gateway
    from serving.errors import ApiError
    from serving.resilience import fault_store

    config, _ = drill_config(config)
    identity = Identity(config)
    capture = _TraceCapture()
    trace = logging.getLogger("citadel.trace")
    trace.addHandler(capture)
    trace.setLevel(logging.INFO)
    gateway = build_gateway(config)
    # A working reranker first (the default is none, which reports every answer as rerank_skipped).
    gateway.answers.reranker = GuardedReranker(_KeepOrderReranker(), Guard())
    store = fault_store(config)
    outcomes: list[dict] = []
    lock = threading.Lock()

    def load(phase: str, stop_at: float, worker: int) -> None:
        headers = identity.headers(worker)
        caller = gateway.caller(headers["authorization"], headers["x-citadel-user-context"])
        turn = worker
        while time.monotonic() < stop_at:
            turn += 1
            try:
                if turn % 2:
                    body = gateway.retrieve(caller, RETRIEVE_QUERIES[turn % len(RETRIEVE_QUERIES)], 8, uuid.uuid4().hex)
                    chunks = [p["chunk_id"] for p in body["passages"]]
                else:
                    body = gateway.answer(caller, ANSWER_QUESTION, uuid.uuid4().hex)
                    chunks = [c["chunk_id"] for c in body["citations"]]
                outcome = {"phase": phase, "status": 200, "chunks": chunks, "degraded": body.get("degraded", [])}
            except ApiError as error:
                outcome = {"phase": phase, "status": error.status, "code": error.code, "chunks": []}
            with lock:
                outcomes.append(outcome)

    def phase(name: str) -> None:
        stop_at = time.monotonic() + phase_s
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(lambda w: load(name, stop_at, w), range(concurrency)))

    from citadel.drills import FaultSpec

    phase("healthy")
    store.set(FaultSpec(stage="catalog", error_rate=1.0))
    time.sleep(0.6)  # the store's read interval
    phase("permissions_down")
    store.clear("catalog")
    recovered_s = _wait_for_catalog(gateway, identity)
    log({"event": "catalog breaker closed again", "after_s": recovered_s})
    gateway.answers.reranker = GuardedReranker(_FailingReranker(), Guard())
    phase("reranker_failing")
    trace.removeHandler(capture)
    report = _permissions_report(outcomes, capture.checked, log)
    report["catalog_breaker_closed_after_s"] = recovered_s
    return report


RECOVERY_TIMEOUT_S = 120.0
RECOVERY_POLL_S = 0.2


def _wait_for_catalog(gateway, identity: Identity) -> float:
    """After the store is back, a trickle of requests lets the catalog breaker probe and return in
    stages (DESIGN.md §5); until it is closed, requests keep failing closed."""
    from citadel.resilience.breaker import BreakerState
    from serving.errors import ApiError

    breaker = gateway.resilience.breakers["catalog"]
    headers = identity.headers(0)
    caller = gateway.caller(headers["authorization"], headers["x-citadel-user-context"])
    started = time.monotonic()
    while breaker.state is not BreakerState.CLOSED and time.monotonic() - started < RECOVERY_TIMEOUT_S:
        try:
            gateway.retrieve(caller, RETRIEVE_QUERIES[0], 8, uuid.uuid4().hex)
        except ApiError:
            pass
        time.sleep(RECOVERY_POLL_S)
    return round(time.monotonic() - started, 1)


class _FailingReranker:
    model_id = "failing-reranker"

    def rerank(self, question, passages, top_n):
        raise RuntimeError("reranker unavailable (drill)")


class _KeepOrderReranker:
    model_id = "keep-order"

    def rerank(self, question, passages, top_n):
        return list(passages)[:top_n]


def _permissions_report(outcomes: list[dict], checked: set[str], log) -> dict:
    report = {}
    for phase in ("healthy", "permissions_down", "reranker_failing"):
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
