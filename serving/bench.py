"""`citadel bench serve`: latency and throughput of /v1/answer, fused vs split vs in-process, one run.

The same home, questions and stages are measured three ways at each concurrency:
- **inprocess**: the Gateway object called directly from N threads (no HTTP, no Ray): the floor;
- **fused**: the Serve app with every stage in one replica, over HTTP through Serve's proxy;
- **split**: one deployment per stage (autoscaled retriever), over HTTP.
The answer cache is off and budgets are effectively unlimited, so every request runs every stage.
While the split topology is loaded, replica counts are sampled to show autoscaling up and back down.
The load generator shares this machine's cores with what it measures; figures are relative.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from citadel.config import CitadelConfig
from citadel.identity.context import sign_user_context
from citadel.identity.credentials import ALL_TENANTS, add_credential
from citadel.identity.keys import current_service_key

QUESTIONS = [
    "What is the hotel limit per night in London?",
    "How much is reimbursed for home office equipment?",
    "Who approves expenses above the limit?",
    "What standard discount can sales offer?",
    "How many days per week may staff work remotely?",
    "What is the per diem for meals when travelling?",
    "How do I report a lost laptop?",
    "What is the parental leave policy for contractors in Brazil?",
]
TENANT_GROUPS = {"acme": ("staff",), "northwind": ("sales",)}
UNLIMITED = 10**9
MS = 1000.0
PERCENTILES = (50, 95, 99)
HTTP_TIMEOUT_S = 60.0
SAMPLE_EVERY_S = 1.0
BENCH_SERVICE = "bench"


@dataclass
class Cell:
    topology: str
    concurrency: int
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    errors_5xx: int = 0
    seconds: float = 0.0

    def row(self) -> dict:
        p50, p95, p99 = (round(percentile(self.latencies_ms, q), 2) for q in PERCENTILES)
        return {"topology": self.topology, "concurrency": self.concurrency,
                "p50_ms": p50, "p95_ms": p95, "p99_ms": p99,
                "rps": round(len(self.latencies_ms) / self.seconds, 2) if self.seconds else 0.0,
                "requests": len(self.latencies_ms), "errors": self.errors, "errors_5xx": self.errors_5xx}


def bench_config(config: CitadelConfig) -> CitadelConfig:
    """The config under test: no answer cache, budgets out of the way, a bench credential."""
    config = config.model_copy(deep=True)
    config.home = Path(config.home).resolve()
    config.state.answer_cache_enabled = False
    config.state.budget_requests_per_day = UNLIMITED
    config.state.budget_cost_per_day = float(UNLIMITED)
    config.state.redis_url = ""
    return config


class Identity:
    """A bench service credential and signed user contexts, one user per worker."""

    def __init__(self, config: CitadelConfig):
        self.service = f"{BENCH_SERVICE}-{uuid.uuid4().hex[:6]}"
        # a load generator drives whichever tenants a run names: every tenant, granted explicitly
        self.token = add_credential(config.credentials_path, self.service, [ALL_TENANTS])
        self._key = current_service_key(config.service_keys_path, self.service, create=True)
        self._audience = config.identity.audience
        self._ttl_s = config.identity.max_ttl_s

    def headers(self, worker: int, tenant: str | None = None) -> dict:
        """A user per worker; workers alternate between the example tenants unless one is named."""
        tenant = tenant or list(TENANT_GROUPS)[worker % len(TENANT_GROUPS)]
        context = sign_user_context(self._key, tenant, f"user{worker}", list(TENANT_GROUPS[tenant]),
                                    self._ttl_s, self._audience, int(time.time()))
        return {"authorization": f"Bearer {self.token}", "x-citadel-user-context": context}


# ---------------------------------------------------------------------- load generators
@dataclass
class Completion:
    t_s: float  # since the start of the run, when the response arrived
    latency_ms: float
    status: int
    body: dict | None = None


@dataclass
class LoadRun:
    started: float = field(default_factory=time.monotonic)
    completions: list[Completion] = field(default_factory=list)

    def since(self) -> float:
        return time.monotonic() - self.started


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (1-99) of `values`; 0 when there are none."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(sorted(values), n=100, method="inclusive")[int(q) - 1]


async def drive(url: str, identity: Identity, run: LoadRun, path: str, body_of: Callable[[int], dict],
                concurrency: int, duration_s: float, keep_bodies: bool = False,
                tenant: str | None = None) -> list[Completion]:
    """`concurrency` clients sending requests back to back for `duration_s`; returns this call's completions."""
    first = len(run.completions)
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT_S, limits=limits) as client:
        stop_at = time.monotonic() + duration_s

        async def worker(index: int) -> None:
            headers, turn = identity.headers(index, tenant), index
            while time.monotonic() < stop_at:
                started = time.monotonic()
                try:
                    response = await client.post(path, json=body_of(turn), headers=headers)
                    status, body = response.status_code, (response.json() if keep_bodies else None)
                except httpx.HTTPError:
                    status, body = 599, None
                turn += 1
                run.completions.append(Completion(run.since(), (time.monotonic() - started) * MS, status, body))

        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return run.completions[first:]


async def _http_load(url: str, identity: Identity, cell: Cell, duration_s: float) -> None:
    """The questions in turn on /v1/answer from `cell.concurrency` clients, tallied into the cell."""
    started = time.perf_counter()
    done = await drive(url, identity, LoadRun(), "/v1/answer",
                       lambda turn: {"question": QUESTIONS[turn % len(QUESTIONS)]}, cell.concurrency, duration_s)
    cell.seconds = time.perf_counter() - started
    for completion in done:
        if completion.status == 200:
            cell.latencies_ms.append(completion.latency_ms)
        else:
            cell.errors += 1
            cell.errors_5xx += completion.status >= 500


def _inprocess_load(gateway, identity: Identity, cell: Cell, duration_s: float) -> None:
    from serving.errors import ApiError

    lock = threading.Lock()
    stop_at = time.perf_counter() + duration_s

    def worker(index: int) -> None:
        headers, turn = identity.headers(index), index
        caller = gateway.caller(headers["authorization"], headers["x-citadel-user-context"])
        while time.perf_counter() < stop_at:
            question = QUESTIONS[turn % len(QUESTIONS)]
            turn += 1
            started = time.perf_counter()
            try:
                gateway.answer(caller, question, uuid.uuid4().hex)
                ok = True
            except ApiError:
                ok = False
            elapsed = (time.perf_counter() - started) * MS
            with lock:
                if ok:
                    cell.latencies_ms.append(elapsed)
                else:
                    cell.errors += 1

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(cell.concurrency) as pool:
        list(pool.map(worker, range(cell.concurrency)))
    cell.seconds = time.perf_counter() - started


# ---------------------------------------------------------------------- autoscaling log
class ReplicaLog:
    """Samples Serve's running replica counts in the background while a topology is loaded."""

    def __init__(self) -> None:
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()

    def start(self) -> "ReplicaLog":
        self._thread = threading.Thread(target=self._run, daemon=True, name="replica-log")
        self._thread.start()
        return self

    def _run(self) -> None:
        from ray import serve

        last: dict[str, int] = {}
        while not self._stop.wait(SAMPLE_EVERY_S):
            counts = {}
            for app in serve.status().applications.values():
                for name, deployment in app.deployments.items():
                    counts[name] = sum(n for state, n in deployment.replica_states.items() if state == "RUNNING")
            if counts != last:
                self.samples.append({"t_s": round(time.monotonic() - self._t0, 1), "replicas": counts})
                last = counts

    def mark(self, label: str) -> None:
        self.samples.append({"t_s": round(time.monotonic() - self._t0, 1), "event": label})

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


# ---------------------------------------------------------------------- the benchmark
def bench_serve(config: CitadelConfig, concurrencies: list[int], duration_s: float, warmup_s: float,
                settle_down_s: float, log=print) -> dict:
    """Runs inprocess, fused and split at each concurrency; returns {"rows", "autoscaling", "notes"}."""
    from serving.compose import build_gateway
    from serving.local import replace_app, serve_locally

    config = bench_config(config)
    identity = Identity(config)
    rows: list[dict] = []

    gateway = build_gateway(config)
    for concurrency in concurrencies:
        _inprocess_load(gateway, identity, Cell("inprocess", concurrency), warmup_s)
        cell = Cell("inprocess", concurrency)
        _inprocess_load(gateway, identity, cell, duration_s)
        rows.append(cell.row())
        log(rows[-1])
    gateway.catalog.close()

    replicas = ReplicaLog()
    with serve_locally(config) as url:
        for topology in ("fused", "split"):
            if topology == "split":
                config.serving.topology = "split"
                replace_app(config)
                replicas.start()
            for concurrency in concurrencies:
                replicas.mark(f"{topology} load c={concurrency}")
                asyncio.run(_http_load(url, identity, Cell(topology, concurrency), warmup_s))
                cell = Cell(topology, concurrency)
                asyncio.run(_http_load(url, identity, cell, duration_s))
                rows.append(cell.row())
                log(rows[-1])
        replicas.mark("load stopped")
        time.sleep(settle_down_s)
        replicas.stop()
    return {"rows": rows, "autoscaling": replicas.samples, "ratios": _ratios(rows)}


def _ratios(rows: list[dict]) -> list[dict]:
    """Per concurrency: p50 of fused and split over in-process, and throughput over in-process."""
    by = {(r["topology"], r["concurrency"]): r for r in rows}
    out = []
    for (topology, concurrency), row in sorted(by.items()):
        base = by.get(("inprocess", concurrency))
        if topology == "inprocess" or base is None or not base["p50_ms"] or not base["rps"]:
            continue
        out.append({"topology": topology, "concurrency": concurrency,
                    "p50_vs_inprocess": round(row["p50_ms"] / base["p50_ms"], 3),
                    "rps_vs_inprocess": round(row["rps"] / base["rps"], 3)})
    return out
