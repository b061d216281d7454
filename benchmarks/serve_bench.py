"""`citadel bench serve`: latency and throughput of /v1/answer, fused vs split vs in-process, one run.

The same home, questions and stages are measured three ways at each concurrency:
- **inprocess**: the services called directly from N threads (no HTTP, no Ray): the floor;
- **fused**: the Serve app with every stage in one replica, over HTTP through Serve's proxy;
- **split**: one deployment per stage (autoscaled retriever), over HTTP;
- **fused-direct**, **split-direct**: the same deployments reached at their ingress replicas' own ports
  (Serve's direct ingress, serving.direct_ingress), clients spread over the replicas: no proxy hop.
The answer cache is off and budgets are effectively unlimited, so every request runs every stage.
While the split topology is loaded, replica counts are sampled to show autoscaling up and back down.
The load generator shares this machine's cores with what it measures; figures are relative.

This module orchestrates: the bench config and identity, the topologies (serving.ray.local), the
in-process services (serving.services.compose); the measuring itself is loadtests.serve_bench.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Callable

from citadel.config import CitadelConfig
from citadel.errors import CitadelError
from citadel.identity.context import sign_user_context
from citadel.identity.credentials import ALL_TENANTS, add_credential
from citadel.identity.keys import current_service_key
from loadtests.serve_bench import QUESTIONS, floor_ms, measure_http, measure_inprocess, ratios

TENANT_GROUPS = {"acme": ("staff",), "northwind": ("sales",)}
UNLIMITED = 10**9
SAMPLE_EVERY_S = 1.0
BENCH_SERVICE = "bench"
TOPOLOGIES = ("fused", "split")


def bench_config(config: CitadelConfig) -> CitadelConfig:
    """The config under test: no answer cache, budgets out of the way, no shared state store."""
    config = config.model_copy(deep=True)
    config.home = Path(config.home).resolve()
    config.state.answer_cache_enabled = False
    config.state.budget_requests_per_day = UNLIMITED
    config.state.budget_cost_per_day = float(UNLIMITED)
    config.state.redis_url = ""
    config.serving.direct_ingress = True  # the proxy still answers; the replicas' own ports are measured too
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
        """A user per worker; workers alternate between the example tenants unless one is named.
        This is the `headers_for` the loadtests drivers take."""
        tenant = tenant or list(TENANT_GROUPS)[worker % len(TENANT_GROUPS)]
        context = sign_user_context(self._key, tenant, f"user{worker}", list(TENANT_GROUPS[tenant]),
                                    self._ttl_s, self._audience, int(time.time()))
        return {"authorization": f"Bearer {self.token}", "x-citadel-user-context": context}

    def caller(self, services, worker: int, tenant: str | None = None):
        """The verified in-process caller for `worker`, as the HTTP edge would make it from the headers."""
        headers = self.headers(worker, tenant)
        return services.access.caller(headers["authorization"], headers["x-citadel-user-context"])


def error_status(error: BaseException) -> int | None:
    """The HTTP status a CitadelError stands for (4xx the caller's, 5xx the server's); None for
    anything else, which is a bug and propagates instead of being counted."""
    return error.http_status if isinstance(error, CitadelError) else None


def answer_call(services, identity: Identity) -> Callable[[int, int], None]:
    """`call(worker, turn)` for the in-process cell: one /v1/answer through the query service, as the
    worker's user. Callers are verified once per worker, as a client keeps its headers."""
    callers: dict[int, object] = {}  # each worker writes only its own key

    def call(worker: int, turn: int) -> None:
        if worker not in callers:
            callers[worker] = identity.caller(services, worker)
        services.query.answer(callers[worker], QUESTIONS[turn % len(QUESTIONS)], uuid.uuid4().hex)

    return call


# ---------------------------------------------------------------------- autoscaling log
class ReplicaLog:
    """Samples Serve's running replica counts in the background while a topology is loaded."""

    def __init__(self, app_name: str) -> None:
        self.app_name = app_name
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()

    def start(self) -> "ReplicaLog":
        self._thread = threading.Thread(target=self._run, daemon=True, name="replica-log")
        self._thread.start()
        return self

    def _run(self) -> None:
        from serving.ray.status import replica_counts

        last: dict[str, int] = {}
        while not self._stop.wait(SAMPLE_EVERY_S):
            counts = replica_counts(self.app_name)
            if counts != last:  # only changes: the log reads as the autoscaler's decisions
                self.samples.append({"t_s": self._elapsed(), "replicas": counts})
                last = counts

    def _elapsed(self) -> float:
        return round(time.monotonic() - self._t0, 1)

    def mark(self, label: str) -> None:
        self.samples.append({"t_s": self._elapsed(), "event": label})

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


# ---------------------------------------------------------------------- the benchmark
def bench_serve(config: CitadelConfig, concurrencies: list[int], duration_s: float, warmup_s: float,
                settle_down_s: float, log=print) -> dict:
    """Runs inprocess, fused and split at each concurrency; returns {"rows", "autoscaling", "ratios"}."""
    config = bench_config(config)
    identity = Identity(config)
    rows = _inprocess_rows(config, identity, concurrencies, duration_s, warmup_s, log)
    floors: dict[str, float] = {}
    http_rows, autoscaling = _http_rows(config, identity, concurrencies, duration_s, warmup_s, settle_down_s, log,
                                        floors)
    rows += http_rows
    return {"rows": rows, "autoscaling": autoscaling, "ratios": ratios(rows), "healthz_p50_ms": floors}


def _inprocess_rows(config: CitadelConfig, identity: Identity, concurrencies: list[int], duration_s: float,
                    warmup_s: float, log) -> list[dict]:
    from serving.services.compose import build_services

    services = build_services(config)
    call = answer_call(services, identity)
    rows = []
    try:
        for concurrency in concurrencies:
            rows.append(measure_inprocess(call, error_status, concurrency, warmup_s, duration_s))
            log(rows[-1])
    finally:
        services.wiring.raw_catalog.close()
    return rows


def _http_rows(config: CitadelConfig, identity: Identity, concurrencies: list[int], duration_s: float,
               warmup_s: float, settle_down_s: float, log, floors: dict[str, float]) -> tuple[list[dict], list[dict]]:
    """Fused, then split on the same Serve instance, each through Serve's proxy and at its ingress
    replicas' own ports; replicas are logged from the split deploy on, through `settle_down_s` after the
    load stops (the scale-down). `floors` gets each way's /healthz p50 from one client: what Serve's
    proxy (or a replica's own server) and one replica call cost with no work."""
    from serving.ray.local import APP_NAME, replace_app, serve_locally
    from serving.ray.status import direct_ingress_urls

    rows: list[dict] = []
    replicas = ReplicaLog(APP_NAME)
    with serve_locally(config) as url:
        for topology in TOPOLOGIES:
            if topology == "split":
                config.serving.topology = "split"
                replace_app(config)
                replicas.start()
            ways: dict[str, str | list[str]] = {topology: url}
            direct = direct_ingress_urls(APP_NAME, config.serving.host)
            if direct:  # none when an operator's environment turned Serve's direct ingress off
                ways[f"{topology}-direct"] = direct
            for name, target in ways.items():
                floors[name] = floor_ms(target if isinstance(target, str) else target[0])
                log({"topology": name, "healthz_p50_ms": floors[name], "urls": target})
            for concurrency in concurrencies:
                replicas.mark(f"{topology} load c={concurrency}")
                for name, target in ways.items():  # through the proxy and direct, side by side
                    rows.append(measure_http(target, identity.headers, name, concurrency, warmup_s, duration_s))
                    log(rows[-1])
        replicas.mark("load stopped")
        time.sleep(settle_down_s)
        replicas.stop()
    return rows, replicas.samples
