"""Predicted against measured: the capacity model checked, and calibrated, on real load runs and drills.

A load run (`citadel load`, loadtests/run_load.py's `summary.json`) or a drill report measures p50 /
p95 latency and requests/s per endpoint under a known load: `users` closed-loop virtual users
(locust: send, wait for the answer, think) on a known topology. This module predicts the same
figures for the same load and topology from a small service model, so a report can show both:

- `ServiceModel`: effective parallelism (`servers`, the CPUs that bound this machine whatever the
  replica count), a mean service demand per kind of request (retrieve, answer, other), their
  coefficient of variation, and a fixed overhead outside the queue (client, HTTP, proxy hops);
- `predict(run, model)`: a seeded discrete-event simulation of the run's users (the simulator's
  event loop and service-time draws, capacity.simulate) in front of `servers` FIFO slots; the
  throughput comes out of the closed loop (N / (R + Z)), it is not copied from the measurement;
- `default_model(rates)`: what the planner believed before any run was measured (its rates file or
  the workload defaults);
- `fit_model(runs)`: calibration, a coordinate then simplex search that minimises the squared log error of p95,
  p50 and throughput over the measured runs;
- `compare`, `write_model` / `load_model`, and `attach_prediction` for the load and drill reports.

Runs whose users vary over time (diurnal, step, spike shapes) are predicted open-loop at their
measured request rate (so their throughput error is 0 by construction) and are not fitted on.
Locust's `RUN agentic run` entries span a whole agent run (polling sleeps included); they are not
HTTP requests, so the request-level p95 of a run that has them is rebuilt from its HTTP endpoints.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import random
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Literal

import yaml

from capacity.simulate import MS, EventLoop, ServiceTime, draw_service_s
from capacity.workload import MeasuredRates, ModelRatesSpec, RetrieverSpec
from citadel.eval.metrics import percentile

Kind = Literal["retrieve", "answer", "other"]
KINDS: tuple[Kind, ...] = ("retrieve", "answer", "other")
CONSTANT_SHAPES = (None, "", "constant")

# The locustfile's user classes (loadtests/locustfile.py): weights and think times in seconds.
USER_WEIGHTS: dict[Kind, int] = {"retrieve": 10, "answer": 6, "other": 2}
THINK_S: dict[Kind, tuple[float, float]] = {"retrieve": (0.5, 1.5), "answer": (0.5, 1.5), "other": (2.0, 5.0)}
EVENTS_POLL_S = 0.25  # an agent-run user sleeps this long between reads of a run's events
DEFAULT_AGENT_REQUESTS = 3  # conversation + message + one events read, when a run does not say
SPAWN_S = 1.0  # locust starts all users within about a second (spawn rate = users/s)

# Simulated requests per prediction: enough for a stable p95, few enough to stay well under 2 s.
PREDICT_REQUESTS = 4_000
FIT_REQUESTS = PREDICT_REQUESTS  # the same draws as the report's predictions: no fit-vs-report gap
MIN_SIM_S, MAX_SIM_S = 20.0, 300.0
SEED = 7
# Endpoints with fewer requests than this carry too noisy a p95 to be fitted on separately.
MIN_ENDPOINT_REQUESTS = 30
FIT_STEPS = (2.0, 1.3, 1.1, 1.03, 1.01)
FIT_MAX_PASSES = 6
SIMPLEX_EVALUATIONS = 120
SIMPLEX_STEP = 0.2  # the first simplex: each parameter x e**0.2 (about +22%)
OVERHEAD_FLOOR_MS = 0.1  # the overhead is searched as log(overhead + this): it may be ~0
Z95 = 1.6448536269514722


# ---------------------------------------------------------------- the measured side


@dataclass(frozen=True)
class EndpointStats:
    name: str
    kind: Kind | Literal["composite", "admin"]
    requests: int
    failures: int = 0
    rps: float = 0.0
    p50: float = 0.0
    p95: float = 0.0
    p99: float = 0.0

    @classmethod
    def from_entry(cls, name: str, entry: dict) -> "EndpointStats":
        return cls(name=name, kind=endpoint_kind(name), requests=int(entry.get("requests") or 0),
                   failures=int(entry.get("failures") or 0), rps=float(entry.get("rps") or 0.0),
                   p50=float(entry.get("p50") or 0.0), p95=float(entry.get("p95") or 0.0),
                   p99=float(entry.get("p99") or 0.0))


def endpoint_kind(name: str) -> Kind | Literal["composite", "admin"]:
    """Locust's `Type Name`: a RUN entry spans a whole agent run; the one admin uploader's requests
    (one per 30 s, beside the users) are no user's; /retrieve and /answer have their own service
    demand; everything else (conversations, messages, events reads) is light `other` work."""
    if name.upper().startswith("RUN "):
        return "composite"
    if "/admin/" in name:
        return "admin"
    if "/retrieve" in name:
        return "retrieve"
    if "/answer" in name:
        return "answer"
    return "other"


@dataclass(frozen=True)
class MeasuredRun:
    """One load run or drill, as far as the capacity model needs it."""

    source: str
    endpoints: tuple[EndpointStats, ...]
    composites: tuple[EndpointStats, ...] = ()
    users: int | None = None
    shape: str | None = None
    run_time_s: float | None = None
    topology: dict = field(default_factory=dict)
    total_p50: float | None = None
    total_p95: float | None = None

    @classmethod
    def from_summary(cls, summary: dict, source: str) -> "MeasuredRun":
        """Parse a summary.json or drill report; ValueError when it measured no HTTP request."""
        entries = summary.get("endpoints") or {}
        total = summary.get("total") or {}
        parsed = [EndpointStats.from_entry(name, entry) for name, entry in entries.items() if isinstance(entry, dict)]
        if not parsed and total.get("requests"):
            # An old summary with only the aggregate: treat it as one kind of request.
            parsed = [EndpointStats.from_entry("POST /v1/retrieve", total)]
        http = tuple(e for e in parsed if e.kind not in ("composite", "admin") and e.requests > 0)
        composites = tuple(e for e in parsed if e.kind == "composite" and e.requests > 0)
        if not http:
            raise ValueError(f"{source}: the run measured no HTTP requests (nothing to compare a prediction with)")
        users = summary.get("users")
        run_time = summary.get("run_time_s")
        # The aggregate's percentiles are the request-level ones only when no RUN entry is mixed in.
        use_total = not composites and total.get("p95")
        return cls(source=source, endpoints=http, composites=composites,
                   users=int(users) if users else None, shape=summary.get("shape"),
                   run_time_s=float(run_time) if run_time else None,
                   topology=dict(summary.get("topology") or {}),
                   total_p50=float(total["p50"]) if use_total and total.get("p50") else None,
                   total_p95=float(total["p95"]) if use_total else None)

    @property
    def requests(self) -> int:
        return sum(e.requests for e in self.endpoints)

    @property
    def closed_loop(self) -> bool:
        """A constant number of users the whole run: the closed-loop prediction applies."""
        return self.shape in CONSTANT_SHAPES and bool(self.users)

    @property
    def rps(self) -> float:
        measured = sum(e.rps for e in self.endpoints)
        if measured > 0 or not self.run_time_s:
            return measured
        return self.requests / self.run_time_s

    @property
    def p95_ms(self) -> float:
        return self.total_p95 if self.total_p95 else mixture_quantile(self.endpoints, 0.95)

    @property
    def p50_ms(self) -> float:
        return self.total_p50 if self.total_p50 else mixture_quantile(self.endpoints, 0.50)

    def kind_requests(self, kind: str) -> int:
        return sum(e.requests for e in self.endpoints if e.kind == kind)

    def kind_p95_ms(self, kind: str) -> float | None:
        members = [e for e in self.endpoints if e.kind == kind]
        return mixture_quantile(members, 0.95) if members else None

    def kinds(self) -> list[Kind]:
        return [k for k in KINDS if self.kind_requests(k) > 0]

    def agent_requests_per_run(self) -> float:
        """HTTP requests an agent-run user sends per run (conversation, message, events reads)."""
        runs = sum(c.requests for c in self.composites)
        other = self.kind_requests("other")
        return max(1.0, other / runs) if runs and other else float(DEFAULT_AGENT_REQUESTS)

    def cpus(self) -> float | None:
        cpus = self.topology.get("cpus")
        return float(cpus) if cpus else None


def mixture_quantile(endpoints: Iterable[EndpointStats], share: float) -> float:
    """The `share` quantile of several endpoints' latencies together, each taken as lognormal
    through its p50 and p95 and weighted by its request count (locust gives no raw samples)."""
    parts = [(e.requests, e.p50, e.p95) for e in endpoints if e.requests > 0 and e.p50 > 0]
    if not parts:
        return 0.0
    if len(parts) == 1:
        _, p50, p95 = parts[0]
        return p50 if share == 0.5 else (p95 if share == 0.95 else _lognormal_quantile(p50, p95, share))
    total = sum(n for n, _, _ in parts)

    def cdf(x: float) -> float:
        value = 0.0
        for n, p50, p95 in parts:
            sigma = max(1e-6, math.log(max(p95, p50) / p50) / Z95)
            value += n / total * 0.5 * (1.0 + math.erf(math.log(x / p50) / (sigma * math.sqrt(2.0))))
        return value

    low, high = min(p for _, p, _ in parts) * 0.01, max(p95 for _, _, p95 in parts) * 100.0
    for _ in range(80):  # bisection in log space
        middle = math.sqrt(low * high)
        low, high = (middle, high) if cdf(middle) < share else (low, middle)
    return math.sqrt(low * high)


def _lognormal_quantile(p50: float, p95: float, share: float) -> float:
    sigma = math.log(max(p95, p50) / p50) / Z95
    z = math.sqrt(2.0) * _erfinv(2.0 * share - 1.0)
    return p50 * math.exp(sigma * z)


def _erfinv(y: float) -> float:
    """Inverse error function by Newton's method (enough for percentiles)."""
    x = 0.0
    for _ in range(50):
        x -= (math.erf(x) - y) / (2.0 / math.sqrt(math.pi) * math.exp(-x * x))
    return x


# ---------------------------------------------------------------- the model


@dataclass(frozen=True)
class ServiceModel:
    """Few parameters, each one physical; times in ms."""

    servers: int = 2  # requests served at once: min(CPUs, replicas x slots); CPUs bind on this machine
    retrieve_ms: float = 20.0  # mean CPU demand of one /v1/retrieve on a server
    answer_ms: float = 40.0  # ... of one /v1/answer
    other_ms: float = 6.0  # ... of a light request (conversation, message, events read)
    cv: float = 1.0  # coefficient of variation of those demands (lognormal)
    overhead_ms: float = 1.0  # latency outside the queue: client, HTTP parsing, proxy hops

    def demand_ms(self, kind: str) -> float:
        return {"retrieve": self.retrieve_ms, "answer": self.answer_ms}.get(kind, self.other_ms)

    def servers_for(self, run: MeasuredRun) -> int:
        """Parallelism for this run's topology: never more than the run's CPUs, nor the machine's."""
        cpus = run.cpus()
        return max(1, min(self.servers, int(cpus)) if cpus else self.servers)


def default_model(rates: dict | None = None) -> ServiceModel:
    """The prediction before calibration: what the planner's rates say (a `calibrate` rates file's
    mapping, or the workload defaults), with no load run measured.

    retrieve = a query embedding on one CPU core + one search (HNSW + BM25 + the Serve hop when
    calibrated, else the workload's search_service_ms); answer = retrieve + one more hop (the
    reranker is off by default); other = one hop; servers = the CPU cores (the rates file's, else
    this machine's).
    """
    data = dict(rates or {})
    data = data.get("rates", data)
    measured = MeasuredRates.model_validate({k: v for k, v in data.items() if k in MeasuredRates.model_fields})
    retriever, models = RetrieverSpec(), ModelRatesSpec()
    # A query (~32 tokens) costs what the GPU rates say relative to a 256-token passage.
    query_share = models.embed_seq_per_s_per_gpu / models.query_embed_seq_per_s_per_gpu
    embed_rate = measured.embed_seq_per_s_cpu or models.embed_seq_per_s_per_cpu_core
    query_embed_ms = 1e3 / embed_rate * query_share
    if measured.hnsw_search_ms is not None and measured.bm25_search_ms is not None:
        search_ms = measured.hnsw_search_ms + measured.bm25_search_ms + retriever.per_request_overhead_ms
    else:
        search_ms = retriever.search_service_ms
    retrieve_ms = query_embed_ms + search_ms
    servers = int(measured.cpu_cores or os.cpu_count() or 1)
    return ServiceModel(servers=max(1, servers), retrieve_ms=retrieve_ms,
                        answer_ms=retrieve_ms + retriever.per_request_overhead_ms,
                        other_ms=retriever.per_request_overhead_ms, cv=0.5, overhead_ms=0.0)


# ---------------------------------------------------------------- the simulation


class _Servers:
    """`count` FIFO slots shared by every request (the CPUs), plus a fixed overhead outside them."""

    def __init__(self, loop: EventLoop, rng: random.Random, model: ServiceModel, count: int) -> None:
        self.loop, self.rng, self.model, self.count = loop, rng, model, count
        self.busy = 0
        self.busy_s = 0.0
        self.queue: deque[tuple[str, Callable[[], None]]] = deque()
        self.services = {kind: ServiceTime(distribution="lognormal", mean_ms=model.demand_ms(kind), cv=model.cv)
                         for kind in KINDS}

    def submit(self, kind: str, on_done: Callable[[], None]) -> None:
        if self.busy < self.count:
            self._start(kind, on_done)
        else:
            self.queue.append((kind, on_done))

    def _start(self, kind: str, on_done: Callable[[], None]) -> None:
        self.busy += 1
        service = draw_service_s(self.rng, self.services[kind])
        self.busy_s += service
        self.loop.after(service, lambda: self._finish(on_done))

    def _finish(self, on_done: Callable[[], None]) -> None:
        self.busy -= 1
        self.loop.after(self.model.overhead_ms * MS, on_done)
        if self.queue:
            self._start(*self.queue.popleft())


@dataclass
class _Samples:
    latencies: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})

    def add(self, kind: str, seconds: float) -> None:
        self.latencies[kind].append(seconds)


def users_per_class(users: int, kinds: list[Kind]) -> dict[Kind, int]:
    """Locust's split of `users` over the classes by weight: each class at least one user when there
    are enough users, the rest to the classes furthest below their exact share."""
    weights = {k: USER_WEIGHTS[k] for k in kinds}
    total = sum(weights.values())
    exact = {k: users * w / total for k, w in weights.items()}
    floor = 1 if users >= len(kinds) else 0
    counts = {k: max(floor, int(share)) for k, share in exact.items()}
    while sum(counts.values()) < users:
        counts[max(kinds, key=lambda k: exact[k] - counts[k])] += 1
    while sum(counts.values()) > users:  # the floor of one each overshot: take from the most over
        counts[max(kinds, key=lambda k: counts[k] - exact[k])] -= 1
    return counts


def _user_kinds(run: MeasuredRun) -> list[Kind]:
    kinds = [k for k in ("retrieve", "answer") if run.kind_requests(k)]
    if run.kind_requests("other") or run.composites:
        kinds.append("other")
    return kinds


def _sim_seconds(rate_guess: float, requests: int) -> float:
    return min(MAX_SIM_S, max(MIN_SIM_S, requests / max(rate_guess, 1e-6)))


def _simulate_closed(run: MeasuredRun, model: ServiceModel, requests: int, seed: int) -> tuple[_Samples, float, float]:
    """The run's users, each: request(s), wait for the answer, think; as the locustfile does."""
    loop, rng = EventLoop(), random.Random(seed)
    servers = _Servers(loop, rng, model, model.servers_for(run))
    samples = _Samples()
    counts = users_per_class(run.users or 1, _user_kinds(run))
    agent_requests = max(1, round(run.agent_requests_per_run()))
    think_mean = sum(n * sum(THINK_S[k]) / 2 for k, n in counts.items()) / max(1, sum(counts.values()))
    duration = _sim_seconds(sum(counts.values()) / think_mean, requests)

    def start_user(kind: Kind) -> None:
        burst = agent_requests if kind == "other" else 1
        state = {"left": burst}

        def send() -> None:
            sent = loop.now
            servers.submit(kind, lambda: answered(sent))

        def answered(sent: float) -> None:
            if loop.now <= duration:
                samples.add(kind, loop.now - sent)
            state["left"] -= 1
            if state["left"] > 0:
                loop.after(EVENTS_POLL_S, send)
                return
            state["left"] = burst
            loop.after(rng.uniform(*THINK_S[kind]), send)

        send()

    for kind, n in counts.items():
        for _ in range(n):
            loop.at(rng.uniform(0.0, SPAWN_S), lambda k=kind: start_user(k))
    loop.run(until=duration)
    return samples, duration, servers.busy_s


def _simulate_open(run: MeasuredRun, model: ServiceModel, requests: int, seed: int) -> tuple[_Samples, float, float]:
    """Poisson arrivals at the measured rate, kinds in the measured proportions (varying shapes)."""
    loop, rng = EventLoop(), random.Random(seed)
    servers = _Servers(loop, rng, model, model.servers_for(run))
    samples = _Samples()
    rate = max(run.rps, 1e-3)
    duration = _sim_seconds(rate, requests)
    kinds = run.kinds()
    weights = [run.kind_requests(k) for k in kinds]
    now = 0.0
    while True:
        now += rng.expovariate(rate)
        if now >= duration:
            break
        kind = rng.choices(kinds, weights)[0]
        loop.at(now, lambda k=kind, t=now: servers.submit(k, lambda: samples.add(k, loop.now - t)))
    loop.run(until=duration + 60.0)
    return samples, duration, servers.busy_s


def predict(run: MeasuredRun, model: ServiceModel, requests: int = PREDICT_REQUESTS, seed: int = SEED) -> dict:
    """Predicted p50/p95/p99 (ms) and throughput (requests/s) for the run's load and topology.

    Closed loop (a constant number of users): the throughput is the simulation's, X = N / (R + Z).
    Otherwise: open loop at the measured request rate, so only the latencies are predictions.
    """
    simulate = _simulate_closed if run.closed_loop else _simulate_open
    samples, duration, busy_s = simulate(run, model, requests, seed)
    every = sorted(s for values in samples.latencies.values() for s in values)
    servers = model.servers_for(run)
    return {
        "loop": "closed" if run.closed_loop else "open",
        "servers": servers,
        "requests": len(every),
        "p50_ms": percentile(every, 50) / MS,
        "p95_ms": percentile(every, 95) / MS,
        "p99_ms": percentile(every, 99) / MS,
        "throughput_rps": len(every) / duration if run.closed_loop else run.rps,
        "utilisation": busy_s / (duration * servers),
        "kinds": {kind: {"requests": len(values), "p50_ms": percentile(values, 50) / MS,
                         "p95_ms": percentile(values, 95) / MS}
                  for kind, values in samples.latencies.items() if values},
    }


def error_pct(predicted: float, measured: float) -> float | None:
    """(predicted - measured) / measured in percent; None when nothing was measured."""
    return None if not measured else 100.0 * (predicted - measured) / measured


# ---------------------------------------------------------------- calibration


def fit_model(runs: list[MeasuredRun], start: ServiceModel | None = None) -> ServiceModel:
    """Calibrate from measured runs: for each whole number of servers up to the start model's (the
    CPUs), a coordinate search (multiplicative steps, shrinking), then a Nelder-Mead simplex in log
    space, over the demands, cv and overhead, minimising the squared log errors of p95, p50 and
    throughput per run and of each kind's p95; the servers with the lowest loss win. Fewer servers
    than CPUs is the usual answer on a small machine: the load generator, Serve's proxy and the
    interpreter's lock take their share of the cores.

    Needs at least two closed-loop runs: one load level cannot tell queueing from service time.
    """
    usable = [run for run in runs if run.closed_loop]
    if len(usable) < 2:
        raise ValueError(f"calibration needs at least 2 runs with a constant number of users; got {len(usable)} "
                         f"of {len(runs)} (varying shapes are skipped: their users change during the run)")
    start = start or default_model()
    fits = [_fit_at(usable, replace(start, servers=servers)) for servers in range(1, max(1, start.servers) + 1)]
    return min(fits, key=lambda fit: fit[1])[0]


def _fit_at(usable: list[MeasuredRun], start: ServiceModel) -> tuple[ServiceModel, float]:
    """The best model with `start.servers` servers, and its loss."""
    model = _initial_guess(usable, start)
    fitted = [name for name in ("retrieve_ms", "answer_ms", "other_ms") if _kind_of(name) in _kinds_seen(usable)]
    fitted += ["cv", "overhead_ms"]
    model, best = _coordinate_search(usable, model, fitted)
    # Demands, cv and overhead trade off against each other (a longer tail or a slower answer both
    # raise p95), which strands a search along the axes; a simplex search moves along the valleys.
    model = _simplex_search(usable, model, fitted, best)
    return model, _loss(usable, model)


def _coordinate_search(runs: list[MeasuredRun], model: ServiceModel, names: list[str]) -> tuple[ServiceModel, float]:
    best = _loss(runs, model)
    for step in FIT_STEPS:
        for _ in range(FIT_MAX_PASSES):
            improved = False
            for name in names:
                for candidate in (_scaled(model, name, step), _scaled(model, name, 1.0 / step)):
                    loss = _loss(runs, candidate)
                    if loss < best - 1e-12:
                        model, best, improved = candidate, loss, True
            if not improved:
                break
    return model, best


def _to_point(model: ServiceModel, names: list[str]) -> list[float]:
    return [math.log(getattr(model, n) + (OVERHEAD_FLOOR_MS if n == "overhead_ms" else 0.0)) for n in names]


def _from_point(model: ServiceModel, names: list[str], point: list[float]) -> ServiceModel:
    values = {}
    for name, x in zip(names, point):
        value = math.exp(min(x, 20.0))
        if name == "overhead_ms":
            value = max(0.0, value - OVERHEAD_FLOOR_MS)
        elif name == "cv":
            value = min(4.0, max(0.05, value))
        values[name] = value
    return replace(model, **values)


def _simplex_search(runs: list[MeasuredRun], model: ServiceModel, names: list[str], best: float) -> ServiceModel:
    """Nelder-Mead in log space, from `model`, for at most SIMPLEX_EVALUATIONS losses."""
    def loss_at(point: list[float]) -> float:
        return _loss(runs, _from_point(model, names, point))

    start = _to_point(model, names)
    simplex = [(best, start)]
    for i in range(len(start)):
        point = list(start)
        point[i] += SIMPLEX_STEP
        simplex.append((loss_at(point), point))
    evaluations = len(start)
    while evaluations < SIMPLEX_EVALUATIONS:
        simplex.sort(key=lambda entry: entry[0])
        (worst_loss, worst), second_worst_loss = simplex[-1], simplex[-2][0]
        centroid = [sum(p[i] for _, p in simplex[:-1]) / (len(simplex) - 1) for i in range(len(start))]

        def toward(scale: float) -> list[float]:
            return [c + scale * (w - c) for c, w in zip(centroid, worst)]

        reflected = toward(-1.0)
        reflected_loss = loss_at(reflected)
        evaluations += 1
        if reflected_loss < simplex[0][0]:
            expanded = toward(-2.0)
            expanded_loss = loss_at(expanded)
            evaluations += 1
            simplex[-1] = (expanded_loss, expanded) if expanded_loss < reflected_loss else (reflected_loss, reflected)
        elif reflected_loss < second_worst_loss:
            simplex[-1] = (reflected_loss, reflected)
        else:
            contracted = toward(0.5)
            contracted_loss = loss_at(contracted)
            evaluations += 1
            if contracted_loss < worst_loss:
                simplex[-1] = (contracted_loss, contracted)
            else:  # shrink toward the best point
                best_point = simplex[0][1]
                simplex = [simplex[0]] + [
                    (loss_at(shrunk), shrunk)
                    for shrunk in ([b + 0.5 * (x - b) for b, x in zip(best_point, p)] for _, p in simplex[1:])
                ]
                evaluations += len(simplex) - 1
    simplex.sort(key=lambda entry: entry[0])
    return _from_point(model, names, simplex[0][1])


def _kind_of(parameter: str) -> str:
    return parameter.removesuffix("_ms")


def _kinds_seen(runs: list[MeasuredRun]) -> set[str]:
    return {kind for run in runs for kind in run.kinds()}


def _scaled(model: ServiceModel, name: str, factor: float) -> ServiceModel:
    value = getattr(model, name)
    if name == "overhead_ms":
        # The overhead may be (near) zero: scale it above a 0.1 ms floor so it can grow back.
        return replace(model, overhead_ms=max(0.0, (value + OVERHEAD_FLOOR_MS) * factor - OVERHEAD_FLOOR_MS))
    if name == "cv":
        return replace(model, cv=min(4.0, max(0.05, value * factor)))
    return replace(model, **{name: max(0.01, value * factor)})


def _initial_guess(runs: list[MeasuredRun], start: ServiceModel) -> ServiceModel:
    """Each demand from its kind's median latency at the lightest load, where queueing is least."""
    lightest = min(runs, key=lambda run: run.users or 0)
    guesses = {}
    for kind in lightest.kinds():
        medians = [e.p50 for e in lightest.endpoints if e.kind == kind and e.p50 > 0]
        if medians:
            guesses[f"{kind}_ms"] = max(0.1, sum(medians) / len(medians))
    return replace(start, cv=1.0, overhead_ms=1.0, **guesses)


def _log_error(predicted: float, measured: float | None) -> float:
    if not measured or measured <= 0:
        return 0.0
    return math.log(max(predicted, 1e-6) / measured) ** 2


def _loss(runs: list[MeasuredRun], model: ServiceModel) -> float:
    total = 0.0
    for run in runs:
        predicted = predict(run, model, requests=FIT_REQUESTS)
        total += 2.0 * _log_error(predicted["p95_ms"], run.p95_ms)
        total += 2.0 * _log_error(predicted["throughput_rps"], run.rps)
        total += 0.5 * _log_error(predicted["p50_ms"], run.p50_ms)
        for kind, figures in predicted["kinds"].items():
            if run.kind_requests(kind) >= MIN_ENDPOINT_REQUESTS:
                total += 0.5 * _log_error(figures["p95_ms"], run.kind_p95_ms(kind))
    return total


# ---------------------------------------------------------------- comparison and files


def prediction_row(run: MeasuredRun, model: ServiceModel) -> dict:
    predicted = predict(run, model)
    return {"p95_ms": predicted["p95_ms"], "throughput_rps": predicted["throughput_rps"],
            "p95_error_pct": error_pct(predicted["p95_ms"], run.p95_ms),
            "throughput_error_pct": error_pct(predicted["throughput_rps"], run.rps),
            "loop": predicted["loop"]}


def compare(runs: list[MeasuredRun], before: ServiceModel, after: ServiceModel,
            fitted_on: Iterable[str] | None = None) -> list[dict]:
    """One row per run: measured p95 and requests/s, and each model's prediction and error (%)."""
    fitted = set(fitted_on) if fitted_on is not None else None
    rows = []
    for run in runs:
        rows.append({
            "run": run.source,
            "users": run.users,
            "shape": run.shape or "constant",
            "fitted": (run.source in fitted) if fitted is not None else None,
            "measured": {"p95_ms": run.p95_ms, "throughput_rps": run.rps},
            "before": prediction_row(run, before),
            "after": prediction_row(run, after),
        })
    return rows


def write_model(model: ServiceModel, path: str | Path, fitted_on: Iterable[str] = (), note: str = "") -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {"model": asdict(model), "fitted_on": list(fitted_on),
                "fitted_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if note:
        document["note"] = note
    out.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return out


def load_model(path: str | Path) -> ServiceModel:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    values = data.get("model", data)
    known = {name: values[name] for name in ServiceModel.__dataclass_fields__ if name in values}
    model = ServiceModel(**known)
    return replace(model, servers=int(model.servers))


def read_rates(path: str | Path | None) -> dict | None:
    """The `rates:` mapping of a `capacity calibrate` rates file, or None when there is none."""
    if path is None or not Path(path).is_file():
        return None
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    return dict(data.get("rates", data))


def attach_prediction(summary: dict, model_path: Path | None, rates: dict | None = None) -> dict:
    """The prediction for one run, for `citadel load` / `citadel drill` reports: the calibrated model
    when `model_path` exists, else the default one (from `rates`). Never raises on a run that measured
    nothing: it says why there is no prediction instead."""
    calibrated = model_path is not None and Path(model_path).is_file()
    label = "calibrated" if calibrated else "default"
    try:
        model = load_model(model_path) if calibrated else default_model(rates)
    except (OSError, ValueError, TypeError, yaml.YAMLError) as error:
        return {"model": label, "skipped": f"cannot read the model {model_path}: {error}"}
    try:
        run = MeasuredRun.from_summary(summary, source=str(summary.get("out_dir") or "run"))
    except ValueError as error:
        return {"model": label, "skipped": str(error)}
    row = prediction_row(run, model)
    return {"model": label, "loop": row["loop"], "p95_ms": row["p95_ms"], "throughput_rps": row["throughput_rps"],
            "p95_error_pct": row["p95_error_pct"], "throughput_error_pct": row["throughput_error_pct"],
            "measured_p95_ms": run.p95_ms, "measured_throughput_rps": run.rps}


def discover_runs(paths: Iterable[str | Path]) -> list[Path]:
    """Files named, plus every summary.json and report.json under directories named (sorted)."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.name in ("summary.json", "report.json") and p.is_file())
        else:
            found.append(path)
    return found


def load_runs(paths: Iterable[str | Path]) -> tuple[list[MeasuredRun], dict[str, str]]:
    """Parse every run found; the ones that cannot be used are returned with the reason."""
    runs, skipped = [], {}
    for path in discover_runs(paths):
        try:
            runs.append(MeasuredRun.from_summary(json.loads(path.read_text(encoding="utf-8")), str(path)))
        except (ValueError, OSError, AttributeError) as error:
            skipped[str(path)] = str(error)
    return runs, skipped
