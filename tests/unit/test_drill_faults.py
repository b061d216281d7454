"""Fault injection for drills: store, spec validation, and each fault, with a fake sleep and seeded rng."""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import threading

import pytest
from pydantic import ValidationError

from citadel.resilience.faults import NO_FAULTS, FaultInjector, FaultSpec, FaultStore, InjectedFault, sample_latency_s
from citadel.resilience.faults import HANG_POLL_S
from citadel.errors import CitadelError

DRAWS = 1000


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Sleeps:
    """Records requested pauses instead of sleeping; `on_sleep` lets a test act mid-hang."""

    def __init__(self, on_sleep=None):
        self.calls: list[float] = []
        self.on_sleep = on_sleep

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        if self.on_sleep:
            self.on_sleep(len(self.calls))


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def store(tmp_path, clock):
    return FaultStore(tmp_path / "faults", clock=clock)


def injector(store, stage="retriever", **kw):
    kw.setdefault("sleep", Sleeps())
    kw.setdefault("rng", random.Random(7))
    kw.setdefault("exit_fn", lambda: pytest.fail("unexpected kill"))
    return FaultInjector(store, stage, **kw)


# --- store -----------------------------------------------------------------------------------------

def test_store_round_trip_list_and_clear(store, clock):
    saved = store.set(FaultSpec(stage="retriever", latency_ms=50, replicas=[0, 2]))
    store.set(FaultSpec(stage="generator", error_rate=0.5))
    assert saved.created_at == clock.now
    assert store.get("retriever") == saved
    assert [s.stage for s in store.list()] == ["generator", "retriever"]
    store.clear("retriever")
    assert store.get("retriever") is None
    store.clear_all()
    assert store.list() == [] and store.get("generator") is None


def test_write_is_atomic_no_temp_files_left(store):
    store.set(FaultSpec(stage="embedder", latency_ms=5))
    store.set(FaultSpec(stage="embedder", latency_ms=6))
    assert sorted(os.listdir(store.directory)) == ["embedder.json"]
    assert json.loads(store.path("embedder").read_text())["latency_ms"] == 6


def test_get_stats_at_most_once_per_interval_and_sees_other_writers(tmp_path, clock, monkeypatch):
    reader = FaultStore(tmp_path, clock=clock)
    writer = FaultStore(tmp_path, clock=clock)  # another process, in effect
    stats = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: (stats.append(p), real_stat(p, *a, **k))[1])

    for _ in range(100):
        assert reader.get("router") is None
    assert len(stats) == 1  # no spec: one stat, then cached for the interval

    writer.set(FaultSpec(stage="router", latency_ms=10))
    assert reader.get("router") is None  # still within the interval
    clock.now += 0.5
    assert reader.get("router").latency_ms == 10
    writer.set(FaultSpec(stage="router", latency_ms=20))
    clock.now += 0.5
    assert reader.get("router").latency_ms == 20
    writer.clear("router")
    clock.now += 0.5
    assert reader.get("router") is None


def test_unreadable_spec_injects_nothing(store):
    store.path("cache").write_text('{"stage": "cache", "error_rate": 7}')
    assert store.get("cache") is None and store.list() == []


# --- validation ------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [
    {"stage": "retriever", "error_rate": 1.5},
    {"stage": "retriever", "error_rate": -0.1},
    {"stage": "retriever", "latency_ms": -1},
    {"stage": "retreiver"},
    {"stage": "retriever", "replicas": [-1]},
    {"stage": "retriever", "kill": True, "kill_nonce": "../etc"},
    {"stage": "retriever", "surprise": 1},
])
def test_invalid_specs_rejected(bad):
    with pytest.raises(ValidationError):
        FaultSpec(**bad)


def test_kill_without_nonce_gets_one():
    assert FaultSpec(stage="router", kill=True).kill_nonce


# --- injector --------------------------------------------------------------------------------------

def test_no_spec_is_a_no_op(store):
    inj = injector(store)
    inj.before()
    asyncio.run(inj.before_async())
    assert inj._sleep.calls == []
    NO_FAULTS.before()
    asyncio.run(NO_FAULTS.before_async())


def test_fixed_latency_applied(store):
    store.set(FaultSpec(stage="retriever", latency_ms=250))
    inj = injector(store)
    inj.before()
    inj.before()
    assert inj._sleep.calls == [0.25, 0.25]


def test_async_latency_uses_async_sleep(store):
    store.set(FaultSpec(stage="retriever", latency_ms=100))
    slept = []

    async def fake_async_sleep(seconds):
        slept.append(seconds)

    asyncio.run(injector(store, async_sleep=fake_async_sleep).before_async())
    assert slept == [0.1]


@pytest.mark.parametrize("dist, jitter, expect_mean_ms, lo, hi", [
    ("uniform", 20, 100, 80, 120),
    ("exponential", 0, 100, 0, float("inf")),
    ("lognormal", 50, None, 0, float("inf")),  # median 100, checked below
])
def test_distributions(dist, jitter, expect_mean_ms, lo, hi):
    spec = FaultSpec(stage="generator", latency_ms=100, latency_dist=dist, latency_jitter_ms=jitter)
    rng = random.Random(42)
    draws_ms = [sample_latency_s(spec, rng) * 1000 for _ in range(DRAWS)]
    assert all(lo <= d <= hi for d in draws_ms)
    if expect_mean_ms is not None:
        assert statistics.mean(draws_ms) == pytest.approx(expect_mean_ms, rel=0.1)
    else:
        assert statistics.median(draws_ms) == pytest.approx(100, rel=0.1)
    assert len(set(draws_ms)) > DRAWS // 2  # actually random, not a constant


def test_uniform_never_negative():
    spec = FaultSpec(stage="generator", latency_ms=5, latency_dist="uniform", latency_jitter_ms=50)
    rng = random.Random(1)
    assert min(sample_latency_s(spec, rng) for _ in range(DRAWS)) == 0


@pytest.mark.parametrize("rate, lo, hi", [(0.0, 0, 0), (1.0, DRAWS, DRAWS), (0.5, 450, 550)])
def test_error_rate(store, rate, lo, hi):
    store.set(FaultSpec(stage="retriever", error_rate=rate))
    inj = injector(store)
    errors = 0
    for _ in range(DRAWS):
        try:
            inj.before()
        except InjectedFault as exc:
            assert isinstance(exc, CitadelError) and exc.code == "injected_fault"
            errors += 1
    assert lo <= errors <= hi


def test_async_error(store):
    store.set(FaultSpec(stage="retriever", error_rate=1.0))
    with pytest.raises(InjectedFault):
        asyncio.run(injector(store).before_async())


def test_replicas_target_ranks_only(store):
    store.set(FaultSpec(stage="reranker", latency_ms=10, replicas=[0]))
    by_rank = {rank: injector(store, "reranker", rank_fn=lambda r=rank: r) for rank in range(3)}
    for inj in by_rank.values():
        inj.before()
    assert [len(inj._sleep.calls) for inj in by_rank.values()] == [1, 0, 0]


def test_hang_released_when_fault_cleared(store):
    polls_before_clear = 3
    store.set(FaultSpec(stage="catalog", hang=True, latency_ms=10))
    sleeps = Sleeps(on_sleep=lambda n: store.clear("catalog") if n == polls_before_clear else None)
    injector(store, "catalog", sleep=sleeps).before()
    # Released after the clear; the cleared spec's latency is not applied either.
    assert sleeps.calls == [HANG_POLL_S] * polls_before_clear


def test_hang_capped_then_rest_of_spec_applies(store):
    store.set(FaultSpec(stage="catalog", hang=True, max_hang_s=1.2, error_rate=1.0))
    sleeps = Sleeps()
    with pytest.raises(InjectedFault):
        injector(store, "catalog", sleep=sleeps).before()
    assert sum(sleeps.calls) == pytest.approx(1.2)


def test_kill_once_per_nonce_across_restarts(store):
    kills = []
    store.set(FaultSpec(stage="embedder", kill=True, kill_nonce="drill-1", replicas=[1]))

    first = injector(store, "embedder", rank_fn=lambda: 1, exit_fn=lambda: kills.append(1))
    first.before()
    first.before()
    assert kills == [1]
    # The replica "restarts": a new injector, same directory; the nonce is on disk.
    injector(store, "embedder", rank_fn=lambda: 1, exit_fn=lambda: kills.append(2)).before()
    injector(store, "embedder", rank_fn=lambda: 0).before()  # untargeted rank never kills
    assert kills == [1]

    store.set(FaultSpec(stage="embedder", kill=True, kill_nonce="drill-2", replicas=[1]))
    injector(store, "embedder", rank_fn=lambda: 1, exit_fn=lambda: kills.append(3)).before()
    assert kills == [1, 3]
    assert store.killed_path("embedder").read_text().split() == ["drill-1", "drill-2"]


def test_concurrent_replicas_one_kill_per_nonce(store):
    """Threads stand in for replicas racing on the ledger: one nonce kills exactly one of them."""

    replicas = 8
    kills = []
    store.set(FaultSpec(stage="generator", kill=True, kill_nonce="race"))
    injectors = [injector(store, "generator", exit_fn=lambda i=i: kills.append(i)) for i in range(replicas)]
    threads = [threading.Thread(target=inj.before) for inj in injectors]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(kills) == 1
