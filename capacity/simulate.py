"""A seeded discrete-event simulator of clients, replicas, failures and resilience policies.

Clients send requests at `rate_qps` (uniform or Poisson arrivals) to `replicas` replicas, each with
`concurrency` slots and a FIFO queue, and service times drawn from a distribution. At `fault.at_s`
one replica (or all) dies (black-holes requests: they never answer), fails fast, or slows down.
A policy decides what a request does about it:

- `none`: one attempt, wait for it (the M/M/c check uses this).
- `layered_retries`: retries at every nested layer, equal per-try timeouts, no deadline propagation
  and no cancellation (see capacity.retrystorm for the closed form).
- `retry_budget`: one retry layer, retries capped by a token bucket at `budget` x requests.
- `hedge`: a second attempt to another replica once the first is older than the observed quantile
  of answered attempt latencies, capped by a hedge budget; first answer wins, the loser is cancelled.
- `breaker`: a latency circuit breaker in front of a slow-able provider: trips when more than
  (1 - quantile) of a window's calls exceed `slow_threshold_ms`, sends traffic to a fallback while
  open, probes half-open and returns in stages (10% / 50% / 100%).

Output: per-second load offered to the replicas, latency percentiles of answered requests, the
5-second peak load, and the closed-form figure where one applies. Events live in a heapq; time is in
seconds; every random draw comes from one `random.Random(seed)`, so a seed fixes the run.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Callable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from capacity.retrystorm import (
    attempts_from_retries,
    deadline_propagated_amplification,
    every_layer_amplification,
    hedge_amplification,
    retry_budget_amplification,
)
from capacity.sizing import mmc_mean_wait_s
from citadel.eval.metrics import percentile

MS = 1e-3
# Loads are reported as a rolling mean over this many seconds: one-second bins of a Poisson stream
# are noisy, and dashboards rate() over a window too.
PEAK_WINDOW_S = 5
# After the simulated arrivals stop, in-flight retries and queues may drain for at most this long.
DRAIN_LIMIT_S = 60.0


# ---------------------------------------------------------------- scenario spec


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServiceTime(_Spec):
    distribution: Literal["exponential", "lognormal", "constant"] = "lognormal"
    mean_ms: float = Field(10.0, gt=0, description="Mean service time of one request on a slot.")
    cv: float = Field(0.5, ge=0, description="Coefficient of variation (lognormal only).")


class Fault(_Spec):
    at_s: float = Field(10.0, ge=0, description="When the fault starts.")
    until_s: float | None = Field(None, description="When it ends; null: never.")
    replica: int | Literal["all"] = Field(0, description="Which replica (index) or all of them.")
    kind: Literal["dead", "error", "slow"] = Field(
        "dead", description="dead: never answers; error: fails after error_ms; slow: x slow_factor."
    )
    slow_factor: float = Field(10.0, ge=1)
    error_ms: float = Field(1.0, ge=0)


class NonePolicy(_Spec):
    kind: Literal["none"] = "none"
    name: str = "none"
    deadline_ms: float | None = Field(None, description="Give up (fail) after this; null: wait.")


class LayeredRetries(_Spec):
    kind: Literal["layered_retries"] = "layered_retries"
    name: str = "retries-every-layer"
    retries_per_layer: list[int] = Field([3, 2, 2], description="Retries at each layer, outermost first.")
    per_try_timeout_ms: float = Field(200.0, gt=0, description="Same at every layer (the default).")


class RetryBudget(_Spec):
    kind: Literal["retry_budget"] = "retry_budget"
    name: str = "one-retry-layer"
    max_attempts: int = Field(3, ge=1)
    budget: float = Field(0.1, ge=0, description="Retries <= budget x requests.")
    burst: float = Field(10.0, ge=1, description="Token bucket capacity, in retries.")
    per_try_timeout_ms: float = Field(200.0, gt=0)


class Hedge(_Spec):
    kind: Literal["hedge"] = "hedge"
    name: str = "hedged"
    quantile: float = Field(0.95, gt=0, lt=1)
    budget: float = Field(0.1, ge=0, description="Hedges <= budget x requests.")
    burst: float = Field(10.0, ge=1)
    window: int = Field(2_000, ge=10, description="Answered requests the quantile is taken over.")
    refresh_every: int = Field(100, ge=1, description="Recompute the quantile every n answers.")
    initial_delay_ms: float = Field(50.0, gt=0, description="Hedge delay before enough samples.")
    deadline_ms: float = Field(1_000.0, gt=0, description="Fail a request unanswered by then.")


class Breaker(_Spec):
    kind: Literal["breaker"] = "breaker"
    name: str = "latency-breaker"
    slow_threshold_ms: float = Field(2_000.0, gt=0, description="Trip when the quantile exceeds this.")
    quantile: float = Field(0.95, gt=0, lt=1)
    window_s: float = Field(5.0, gt=0, description="Calls judged over this sliding window.")
    min_samples: int = Field(20, ge=1)
    open_s: float = Field(10.0, gt=0, description="Stay open this long before probing.")
    stages: list[float] = Field([0.1, 0.5, 1.0], description="Half-open shares sent to the primary.")
    stage_min_samples: int = Field(20, ge=1, description="Healthy calls needed to advance a stage.")
    deadline_ms: float = Field(10_000.0, gt=0)
    fallback: ServiceTime = Field(
        ServiceTime(mean_ms=300.0, cv=0.3), description="The secondary path (degraded answers)."
    )
    fallback_concurrency: int = Field(64, ge=1)


Policy = Annotated[
    NonePolicy | LayeredRetries | RetryBudget | Hedge | Breaker, Field(discriminator="kind")
]


class Scenario(_Spec):
    name: str = "scenario"
    description: str = ""
    seed: int = 7
    duration_s: float = Field(60.0, gt=0)
    rate_qps: float = Field(190.0, gt=0)
    arrivals: Literal["uniform", "poisson"] = "uniform"
    replicas: int = Field(3, ge=1)
    concurrency: int = Field(8, ge=1, description="Slots per replica.")
    service_time: ServiceTime = ServiceTime()
    fault: Fault | None = Field(None, description="The failure injected; null: a healthy run.")
    settle_s: float = Field(5.0, ge=0, description="Skip this long after the fault for steady means.")
    policies: list[Policy] = Field(default_factory=lambda: [NonePolicy()])


def load_scenario(path: str | Path) -> Scenario:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    return Scenario.model_validate(data)


# ---------------------------------------------------------------- the event loop


class EventLoop:
    """A heapq of (time, sequence, callback); the sequence keeps same-time events in FIFO order."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._sequence = 0

    def at(self, time: float, callback: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (time, self._sequence, callback))
        self._sequence += 1

    def after(self, delay: float, callback: Callable[[], None]) -> None:
        self.at(self.now + delay, callback)

    def run(self, until: float) -> None:
        while self._heap and self._heap[0][0] <= until:
            self.now, _, callback = heapq.heappop(self._heap)
            callback()


class TokenBucket:
    """Each request deposits `rate` tokens (up to `capacity`); a retry or hedge spends one."""

    def __init__(self, rate: float, capacity: float) -> None:
        self.rate, self.capacity, self.tokens = rate, capacity, capacity

    def deposit(self) -> None:
        self.tokens = min(self.capacity, self.tokens + self.rate)

    def take(self) -> bool:
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass
class Job:
    """One attempt on one replica. `on_done(ok)` fires once unless the attempt is cancelled."""

    on_done: Callable[[bool], None]
    sent_at: float
    cancelled: bool = False
    started_at: float | None = None


def draw_service_s(rng: random.Random, spec: ServiceTime) -> float:
    mean = spec.mean_ms * MS
    if spec.distribution == "constant":
        return mean
    if spec.distribution == "exponential":
        return rng.expovariate(1.0 / mean)
    # Lognormal with the given mean and coefficient of variation.
    sigma2 = math.log(1.0 + spec.cv**2)
    return rng.lognormvariate(math.log(mean) - sigma2 / 2.0, math.sqrt(sigma2))


class Replica:
    """`slots` parallel servers and a FIFO queue; the fault decides whether and how fast it answers."""

    def __init__(self, sim: "Simulation", index: int, slots: int, service: ServiceTime) -> None:
        self.sim, self.index, self.slots, self.service = sim, index, slots, service
        self.busy = 0
        self.queue: deque[Job] = deque()

    def submit(self, job: Job) -> None:
        sim = self.sim
        sim.record_offered(self.index)
        state = sim.fault_state(self.index)
        if state == "dead":
            return  # black hole: the caller learns only by timing out
        if state == "error":
            sim.loop.after(sim.scenario.fault.error_ms * MS, lambda: job.on_done(False))
            return
        if self.busy < self.slots:
            self._start(job)
        else:
            self.queue.append(job)

    def _start(self, job: Job) -> None:
        sim = self.sim
        self.busy += 1
        job.started_at = sim.loop.now
        sim.record_wait(job.started_at - job.sent_at)
        service = draw_service_s(sim.rng, self.service)
        if sim.fault_state(self.index) == "slow":
            service *= sim.scenario.fault.slow_factor
        sim.loop.after(service, lambda: self._finish(job))

    def _finish(self, job: Job) -> None:
        self.busy -= 1
        if self.sim.fault_state(self.index) != "dead" and not job.cancelled:
            job.on_done(True)
        while self.queue and self.busy < self.slots:
            waiting = self.queue.popleft()
            if not waiting.cancelled:
                self._start(waiting)


# ---------------------------------------------------------------- one simulation run


@dataclass
class RequestRecord:
    arrived_at: float
    finished_at: float | None = None
    ok: bool = False
    degraded: bool = False


@dataclass
class Counters:
    retries: int = 0
    hedges: int = 0
    breaker_trips: int = 0
    waits: list[float] = field(default_factory=list)


class Simulation:
    def __init__(self, scenario: Scenario, policy: BaseModel, seed: int | None = None) -> None:
        self.scenario, self.policy = scenario, policy
        self.rng = random.Random(scenario.seed if seed is None else seed)
        self.loop = EventLoop()
        self.replicas = [
            Replica(self, i, scenario.concurrency, scenario.service_time) for i in range(scenario.replicas)
        ]
        seconds = int(math.ceil(scenario.duration_s))
        self.offered_per_second = [0] * seconds
        self.fallback_per_second = [0] * seconds
        self.requests: list[RequestRecord] = []
        self.counters = Counters()
        self.fallback: Replica | None = None
        self.handler = _make_handler(self, policy)

    # -- bookkeeping used by replicas and policies

    def fault_state(self, replica_index: int) -> str | None:
        fault, now = self.scenario.fault, self.loop.now
        if replica_index < 0:
            return None  # the breaker's fallback path is a different provider
        if fault is None or now < fault.at_s or (fault.until_s is not None and now >= fault.until_s):
            return None
        if fault.replica != "all" and fault.replica != replica_index:
            return None
        return fault.kind

    def record_offered(self, replica_index: int) -> None:
        second = int(self.loop.now)
        if second < len(self.offered_per_second):
            if replica_index < 0:
                self.fallback_per_second[second] += 1
            else:
                self.offered_per_second[second] += 1

    def record_wait(self, wait_s: float) -> None:
        self.counters.waits.append(wait_s)

    def pick_replica(self, avoid: int | None = None) -> int:
        """Uniformly at random: the load balancer does not know a replica is dead."""
        count = len(self.replicas)
        if avoid is None or count == 1:
            return self.rng.randrange(count)
        choice = self.rng.randrange(count - 1)
        return choice + 1 if choice >= avoid else choice

    def send(self, replica_index: int, on_done: Callable[[bool], None]) -> Job:
        job = Job(on_done=on_done, sent_at=self.loop.now)
        self.replicas[replica_index].submit(job)
        return job

    def finish(self, record: RequestRecord, ok: bool, degraded: bool = False) -> None:
        if record.finished_at is not None:
            return
        record.finished_at, record.ok, record.degraded = self.loop.now, ok, degraded

    # -- driving

    def _arrival_times(self) -> list[float]:
        scenario = self.scenario
        if scenario.arrivals == "uniform":
            count = int(scenario.duration_s * scenario.rate_qps)
            return [i / scenario.rate_qps for i in range(count)]
        times, now = [], 0.0
        while True:
            now += self.rng.expovariate(scenario.rate_qps)
            if now >= scenario.duration_s:
                return times
            times.append(now)

    def run(self) -> dict:
        for arrival in self._arrival_times():
            self.loop.at(arrival, lambda t=arrival: self._arrive(t))
        self.loop.run(until=self.scenario.duration_s + DRAIN_LIMIT_S)
        return summarise(self)

    def _arrive(self, arrived_at: float) -> None:
        record = RequestRecord(arrived_at=arrived_at)
        self.requests.append(record)
        self.handler(record)


# ---------------------------------------------------------------- policies


def _make_handler(sim: Simulation, policy: BaseModel) -> Callable[[RequestRecord], None]:
    builders = {
        "none": _single_attempt,
        "layered_retries": _layered_retries,
        "retry_budget": _retry_budget,
        "hedge": _hedged,
        "breaker": _breaker,
    }
    return builders[policy.kind](sim, policy)


def _single_attempt(sim: Simulation, policy: NonePolicy) -> Callable[[RequestRecord], None]:
    def handle(record: RequestRecord) -> None:
        sim.send(sim.pick_replica(), lambda ok: sim.finish(record, ok))
        if policy.deadline_ms is not None:
            sim.loop.after(policy.deadline_ms * MS, lambda: sim.finish(record, False))

    return handle


def _layered_retries(sim: Simulation, policy: LayeredRetries) -> Callable[[RequestRecord], None]:
    attempts = attempts_from_retries(policy.retries_per_layer)
    timeout = policy.per_try_timeout_ms * MS

    def call_layer(layer: int, on_result: Callable[[bool], None]) -> None:
        # One call into `layer`: its attempts run one after another; an attempt ends when the layer
        # below answers or this layer's per-try timeout fires. A superseded attempt is not cancelled
        # below (no deadline propagation), but its late answer is ignored here.
        state = {"attempt": 0, "done": False}

        def next_or_fail() -> None:
            if state["attempt"] < attempts[layer]:
                launch()
            else:
                state["done"] = True
                on_result(False)

        def launch() -> None:
            state["attempt"] += 1
            if state["attempt"] > 1:
                sim.counters.retries += 1
            mine = state["attempt"]

            def current() -> bool:
                return not state["done"] and state["attempt"] == mine

            def on_child(ok: bool) -> None:
                if not current():
                    return
                if ok:
                    state["done"] = True
                    on_result(True)
                else:
                    next_or_fail()

            sim.loop.after(timeout, lambda: next_or_fail() if current() else None)
            if layer == len(attempts) - 1:
                sim.send(sim.pick_replica(), on_child)
            else:
                call_layer(layer + 1, on_child)

        launch()

    def handle(record: RequestRecord) -> None:
        call_layer(0, lambda ok: sim.finish(record, ok))

    return handle


def _retry_budget(sim: Simulation, policy: RetryBudget) -> Callable[[RequestRecord], None]:
    bucket = TokenBucket(policy.budget, policy.burst)
    timeout = policy.per_try_timeout_ms * MS

    def handle(record: RequestRecord) -> None:
        bucket.deposit()
        state = {"attempt": 0}

        def give_up_or_retry(mine: int) -> None:
            if record.finished_at is not None or state["attempt"] != mine:
                return
            if state["attempt"] < policy.max_attempts and bucket.take():
                sim.counters.retries += 1
                launch()
            else:
                sim.finish(record, False)

        def launch() -> None:
            state["attempt"] += 1
            mine = state["attempt"]

            def on_done(ok: bool) -> None:
                if ok:
                    sim.finish(record, True)
                else:
                    give_up_or_retry(mine)

            sim.send(sim.pick_replica(), on_done)
            sim.loop.after(timeout, lambda: give_up_or_retry(mine))

        launch()

    return handle


class QuantileTracker:
    """The `quantile` of the last `window` samples, recomputed every `refresh_every` samples."""

    def __init__(self, quantile: float, window: int, refresh_every: int, initial: float) -> None:
        self.quantile, self.refresh_every = quantile, refresh_every
        self.samples: deque[float] = deque(maxlen=window)
        self.value, self._since_refresh = initial, 0

    def add(self, sample: float) -> None:
        self.samples.append(sample)
        self._since_refresh += 1
        if self._since_refresh >= self.refresh_every:
            self._since_refresh = 0
            ordered = sorted(self.samples)
            self.value = ordered[min(len(ordered) - 1, int(self.quantile * len(ordered)))]


def _hedged(sim: Simulation, policy: Hedge) -> Callable[[RequestRecord], None]:
    bucket = TokenBucket(policy.budget, policy.burst)
    delay = QuantileTracker(policy.quantile, policy.window, policy.refresh_every, policy.initial_delay_ms * MS)

    def handle(record: RequestRecord) -> None:
        bucket.deposit()
        jobs: list[Job] = []
        state = {"failed": 0, "hedged": False}

        def send_to(replica: int) -> None:
            def on_done(ok: bool) -> None:
                if record.finished_at is not None:
                    return
                if ok:
                    # The wrapper observes its own calls: the request's latency, first answer wins.
                    delay.add(sim.loop.now - record.arrived_at)
                    sim.finish(record, True)
                    for other in jobs:
                        other.cancelled = True  # the loser is cancelled (dropped if still queued)
                    return
                state["failed"] += 1
                if not state["hedged"]:
                    hedge()  # a fast error: hedge now rather than at the quantile
                if state["failed"] == len(jobs):
                    sim.finish(record, False)

            jobs.append(sim.send(replica, on_done))

        def hedge() -> None:
            if record.finished_at is not None or state["hedged"] or not bucket.take():
                return
            state["hedged"] = True
            sim.counters.hedges += 1
            send_to(sim.pick_replica(avoid=primary))

        primary = sim.pick_replica()
        send_to(primary)
        sim.loop.after(delay.value, hedge)
        sim.loop.after(policy.deadline_ms * MS, lambda: sim.finish(record, False))

    return handle


class BreakerState:
    """Closed -> open (on slowness) -> half-open stages -> closed; the primary's health window."""

    def __init__(self, sim: Simulation, policy: Breaker) -> None:
        self.sim, self.policy = sim, policy
        self.mode = "closed"
        self.stage = 0
        self.window: deque[tuple[float, bool]] = deque()  # (time, slow)
        self.stage_samples: list[bool] = []

    def admit_to_primary(self) -> bool:
        if self.mode == "closed":
            return True
        if self.mode == "open":
            return False
        return self.sim.rng.random() < self.policy.stages[self.stage]

    def record(self, slow: bool) -> None:
        now = self.sim.loop.now
        if self.mode == "closed":
            self.window.append((now, slow))
            while self.window and self.window[0][0] < now - self.policy.window_s:
                self.window.popleft()
            if len(self.window) >= self.policy.min_samples and self._too_slow([s for _, s in self.window]):
                self._open()
        elif self.mode == "half_open":
            self.stage_samples.append(slow)
            if self._too_slow(self.stage_samples):
                self._open()
            elif len(self.stage_samples) >= self.policy.stage_min_samples:
                self._advance()

    def _too_slow(self, samples: list[bool]) -> bool:
        # The quantile exceeds the threshold exactly when more than (1 - q) of samples are slow.
        return sum(samples) > (1.0 - self.policy.quantile) * len(samples) and len(samples) >= min(
            self.policy.min_samples, self.policy.stage_min_samples
        )

    def _open(self) -> None:
        self.mode, self.stage = "open", 0
        self.window.clear()
        self.stage_samples = []
        self.sim.counters.breaker_trips += 1
        self.sim.loop.after(self.policy.open_s, self._half_open)

    def _half_open(self) -> None:
        self.mode, self.stage, self.stage_samples = "half_open", 0, []

    def _advance(self) -> None:
        self.stage += 1
        self.stage_samples = []
        if self.stage >= len(self.policy.stages):
            self.mode, self.stage = "closed", 0


def _breaker(sim: Simulation, policy: Breaker) -> Callable[[RequestRecord], None]:
    breaker = BreakerState(sim, policy)
    fallback = Replica(sim, -1, policy.fallback_concurrency, policy.fallback)
    sim.fallback = fallback
    threshold = policy.slow_threshold_ms * MS

    def to_fallback(record: RequestRecord) -> None:
        fallback.submit(Job(on_done=lambda ok: sim.finish(record, ok, degraded=True), sent_at=sim.loop.now))

    def handle(record: RequestRecord) -> None:
        sim.loop.after(policy.deadline_ms * MS, lambda: sim.finish(record, False))
        if not breaker.admit_to_primary():
            to_fallback(record)
            return
        judged = {"done": False}

        def judge(slow: bool) -> None:
            if not judged["done"]:
                judged["done"] = True
                breaker.record(slow)

        def on_done(ok: bool) -> None:
            judge(slow=not ok)
            sim.finish(record, ok)

        sim.send(sim.pick_replica(), on_done)
        # A call still running at the threshold counts as slow then, so a hung provider trips it.
        sim.loop.after(threshold, lambda: judge(slow=True))

    return handle


# ---------------------------------------------------------------- results


def _share_percentile(values: list[float], share: float) -> float:
    """The `share` (0-1) percentile of `values`, NaN when there are none (reported as null)."""
    return percentile(values, share * 100) if values else math.nan


def rolling_peak(series: list[int], window: int = PEAK_WINDOW_S) -> float:
    if len(series) < window:
        return float(max(series, default=0))
    return max(sum(series[i : i + window]) / window for i in range(len(series) - window + 1))


def _latency_percentiles(records: list[RequestRecord]) -> dict:
    answered = sorted(r.finished_at - r.arrived_at for r in records if r.ok and r.finished_at is not None)
    return {
        "p50_ms": _share_percentile(answered, 0.50) / MS,
        "p95_ms": _share_percentile(answered, 0.95) / MS,
        "p99_ms": _share_percentile(answered, 0.99) / MS,
        "mean_ms": (sum(answered) / len(answered) / MS) if answered else math.nan,
    }


def _per_second_p99(sim: Simulation) -> list[float]:
    buckets: list[list[float]] = [[] for _ in sim.offered_per_second]
    for r in sim.requests:
        if r.ok and r.finished_at is not None:
            buckets[min(len(buckets) - 1, int(r.arrived_at))].append(r.finished_at - r.arrived_at)
    return [round(_share_percentile(b, 0.99) / MS, 3) if b else None for b in buckets]


def closed_form_load(scenario: Scenario, policy: BaseModel) -> float | None:
    """What retrystorm's closed forms predict for this policy and fault, when one applies."""
    fault = scenario.fault
    if fault is None or fault.replica == "all":
        return scenario.rate_qps if policy.kind == "none" else None
    share = 1.0 / scenario.replicas
    if policy.kind == "layered_retries":
        attempts = attempts_from_retries(policy.retries_per_layer)
        if fault.kind == "dead":
            return scenario.rate_qps * every_layer_amplification(attempts, share)
        if fault.kind == "error":
            return scenario.rate_qps * deadline_propagated_amplification(attempts, share)
        return None
    if policy.kind == "retry_budget" and fault.kind in ("dead", "error"):
        return scenario.rate_qps * retry_budget_amplification(share, policy.max_attempts, policy.budget)
    if policy.kind == "hedge":
        dead_share = share if fault.kind == "dead" else 0.0
        return scenario.rate_qps * hedge_amplification(dead_share, policy.quantile, policy.budget)
    if policy.kind == "none":
        return scenario.rate_qps
    return None


def closed_form_mean_wait_ms(scenario: Scenario) -> float | None:
    """Erlang C, when the run is an M/M/c queue: Poisson arrivals, exponential service, no fault."""
    if scenario.arrivals != "poisson" or scenario.service_time.distribution != "exponential" or scenario.fault:
        return None
    # Random routing splits a Poisson stream into independent Poisson streams: each replica is its
    # own M/M/c queue with c = its slots, fed rate / replicas.
    per_replica_rate = scenario.rate_qps / scenario.replicas
    return mmc_mean_wait_s(per_replica_rate, scenario.service_time.mean_ms * MS, scenario.concurrency) / MS


def summarise(sim: Simulation) -> dict:
    scenario, policy = sim.scenario, sim.policy
    offered = sim.offered_per_second
    fault_start = scenario.fault.at_s + scenario.settle_s if scenario.fault else scenario.settle_s
    fault_end = scenario.fault.until_s if scenario.fault and scenario.fault.until_s else scenario.duration_s
    steady = offered[int(fault_start) : int(fault_end)] or offered
    during_fault = [r for r in sim.requests if fault_start <= r.arrived_at < fault_end]
    total = len(sim.requests) or 1
    waits = sim.counters.waits
    result = {
        "policy": policy.name,
        "kind": policy.kind,
        "requests": len(sim.requests),
        "peak_load_qps": rolling_peak(offered),
        "peak_1s_load_qps": float(max(offered, default=0)),
        "mean_load_qps_during_fault": sum(steady) / len(steady),
        "closed_form_load_qps": closed_form_load(scenario, policy),
        **_latency_percentiles(sim.requests),
        "during_fault": _latency_percentiles(during_fault),
        "failed_share": sum(1 for r in sim.requests if not r.ok) / total,
        "degraded_share": sum(1 for r in sim.requests if r.degraded) / total,
        "retries": sim.counters.retries,
        "hedges": sim.counters.hedges,
        "breaker_trips": sim.counters.breaker_trips,
        "mean_wait_ms": (sum(waits) / len(waits) / MS) if waits else 0.0,
        "closed_form_mean_wait_ms": closed_form_mean_wait_ms(scenario),
        "per_second": {
            "offered_qps": offered,
            "fallback_qps": sim.fallback_per_second,
            "p99_ms": _per_second_p99(sim),
        },
    }
    return result


def simulate_policy(scenario: Scenario, policy: BaseModel, seed: int | None = None) -> dict:
    return Simulation(scenario, policy, seed).run()


def simulate(scenario: Scenario, policy_name: str | None = None) -> dict:
    """Run every policy of the scenario; the headline fields are the chosen (default: first) one's."""
    names = [policy.name for policy in scenario.policies]
    chosen_name = policy_name or names[0]
    if chosen_name not in names:
        raise ValueError(f"unknown policy {chosen_name!r}; the scenario has {names}")
    runs = [simulate_policy(scenario, policy) for policy in scenario.policies]
    chosen = runs[names.index(chosen_name)]
    comparison = [{k: v for k, v in run.items() if k != "per_second"} for run in runs]
    return {"scenario": scenario.name, "seed": scenario.seed, **chosen, "policies": comparison}


def storm_scenario(base_qps: float, replicas: int, replicas_down: int, retries_per_layer: list[int],
                   retry_budget: float, budget_max_attempts: int, hedge_quantile: float,
                   hedge_budget: float, duration_s: float = 30.0, fault_at_s: float = 10.0,
                   seed: int = 7) -> Scenario:
    """The replica-down scenario built from a workload's resilience figures (for plots and checks).

    Only one replica can be marked dead in a scenario; `replicas_down` > 1 is planned by the closed
    forms alone.
    """
    if replicas_down != 1:
        raise ValueError("the simulator kills exactly one replica; use the closed forms for more")
    return Scenario(
        name="storm-from-workload",
        seed=seed,
        duration_s=duration_s,
        rate_qps=base_qps,
        arrivals="uniform",
        replicas=replicas,
        fault=Fault(at_s=fault_at_s, replica=0, kind="dead"),
        policies=[
            LayeredRetries(retries_per_layer=retries_per_layer),
            RetryBudget(max_attempts=budget_max_attempts, budget=retry_budget),
            Hedge(name="hedged-p95", quantile=hedge_quantile, budget=hedge_budget),
        ],
    )
