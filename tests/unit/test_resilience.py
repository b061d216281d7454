"""Resilience primitives (DESIGN.md §5) on a FakeClock: every breaker transition, hedging, budgets,
deadlines. No real sleeps: time moves only through `clock.advance` / `clock.jump`."""

from __future__ import annotations

import asyncio
import math

import pytest

from citadel.config import BreakerSettings, ResilienceConfig
from citadel.errors import CitadelError
from citadel.resilience import (DEADLINE_HEADER, BreakerOpen, BreakerState, Deadline, DeadlineExceeded, FakeClock,
                                Hedged, InvalidDeadline, LatencyBreaker, RetryBudget, Retrying, RoundRobin,
                                WindowedQuantiles, make_breakers, retry, with_fallback)
from citadel.resilience.clock import MonotonicClock, settle

CLOSED, OPEN, HALF_OPEN, RECOVERING = (BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN,
                                       BreakerState.RECOVERING)
THRESHOLD_MS = 100.0
FAST_MS = 10.0
SLOW_MS = 500.0


def make_settings(**overrides) -> BreakerSettings:
    values = dict(p95_threshold_ms=THRESHOLD_MS, max_error_rate=0.5, window_s=10.0, min_samples=10, cooldown_s=10.0,
                  probe_interval_s=2.0, close_after_probes=3, stages=[0.1, 0.5, 1.0], stage_duration_s=5.0)
    values.update(overrides)
    return BreakerSettings(**values)


def make_breaker(**overrides):
    clock = FakeClock(start=1000.0)
    events = []
    breaker = LatencyBreaker("reranker", make_settings(**overrides), clock,
                             on_transition=lambda *event: events.append(event))
    return breaker, clock, events


def record_many(breaker, n, latency_ms=FAST_MS, ok=True):
    for _ in range(n):
        assert breaker.allow()
        breaker.record(latency_ms, ok)


def trip(breaker):
    record_many(breaker, 10, SLOW_MS)
    assert breaker.state is OPEN


def to_half_open(breaker, clock):
    trip(breaker)
    clock.jump(breaker.settings.cooldown_s)
    assert breaker.state is HALF_OPEN


def to_recovering(breaker, clock):
    to_half_open(breaker, clock)
    for _ in range(breaker.settings.close_after_probes):
        assert breaker.allow()
        breaker.record(FAST_MS, ok=True)
        clock.jump(breaker.settings.probe_interval_s)
    assert breaker.state is RECOVERING


def admitted(breaker, offered):
    return sum(breaker.allow() for _ in range(offered))


# ---- breaker: CLOSED -> OPEN ----

def test_closed_trips_on_p95_over_threshold():
    breaker, _, events = make_breaker()
    record_many(breaker, 100)
    record_many(breaker, 5, SLOW_MS)  # 5 of 105 slow: the 95th percentile is still fast
    assert breaker.state is CLOSED
    breaker.record(SLOW_MS, ok=True)  # 6 of 106: the p95 rank reaches the slow calls
    assert breaker.state is OPEN
    assert events[-1][:3] == ("reranker", CLOSED, OPEN) and "p95" in events[-1][3]


def test_closed_trips_on_error_rate():
    breaker, _, events = make_breaker()
    record_many(breaker, 6)
    record_many(breaker, 5, ok=False)  # 5 / 11 < 50 %
    assert breaker.state is CLOSED
    breaker.record(FAST_MS, ok=False)  # 6 / 12 = 50 %
    assert breaker.state is OPEN
    assert "error rate" in events[-1][3]


def test_no_trip_below_min_samples():
    breaker, _, _ = make_breaker()
    record_many(breaker, 9, SLOW_MS, ok=False)
    assert breaker.state is CLOSED
    breaker.record(SLOW_MS, ok=False)
    assert breaker.state is OPEN


def test_slow_calls_age_out_of_the_window():
    breaker, clock, _ = make_breaker()
    record_many(breaker, 9, SLOW_MS)
    clock.jump(breaker.settings.window_s)
    record_many(breaker, 9, FAST_MS)  # the slow ones are gone: 9 samples, below min_samples
    assert breaker.state is CLOSED


# ---- OPEN -> HALF_OPEN -> probes ----

def test_open_rejects_until_cooldown_then_half_open():
    breaker, clock, events = make_breaker()
    trip(breaker)
    assert not breaker.allow()
    clock.jump(9.9)
    assert breaker.state is OPEN and not breaker.allow()
    clock.jump(0.1)
    assert breaker.state is HALF_OPEN
    assert events[-1][1:3] == (OPEN, HALF_OPEN)
    assert breaker.transitions[-1][0] == pytest.approx(1010.0)  # stamped when it fell due


def test_half_open_spaces_probes():
    breaker, clock, _ = make_breaker()
    to_half_open(breaker, clock)
    assert breaker.allow()  # the first probe
    assert not breaker.allow()
    clock.jump(1.0)
    assert not breaker.allow()
    clock.jump(1.0)
    assert breaker.allow()  # probe_interval_s later


@pytest.mark.parametrize("latency_ms, ok, reason", [(FAST_MS, False, "probe failed"), (SLOW_MS, True, "probe slow")])
def test_failed_or_slow_probe_reopens_and_restarts_cooldown(latency_ms, ok, reason):
    breaker, clock, events = make_breaker()
    to_half_open(breaker, clock)
    assert breaker.allow()
    breaker.record(FAST_MS, ok=True)  # one fast probe, then a bad one resets the streak
    clock.jump(2.0)
    assert breaker.allow()
    breaker.record(latency_ms, ok)
    assert breaker.state is OPEN
    assert events[-1][1:3] == (HALF_OPEN, OPEN) and reason in events[-1][3]
    clock.jump(9.0)
    assert breaker.state is OPEN  # cooldown counted from the failed probe
    clock.jump(1.0)
    assert breaker.state is HALF_OPEN


def test_fast_probes_in_a_row_start_recovery():
    breaker, clock, events = make_breaker()
    to_half_open(breaker, clock)
    for _ in range(2):
        assert breaker.allow()
        breaker.record(FAST_MS, ok=True)
        clock.jump(2.0)
    assert breaker.state is HALF_OPEN
    assert breaker.allow()
    breaker.record(FAST_MS, ok=True)
    assert breaker.state is RECOVERING
    assert events[-1][1:3] == (HALF_OPEN, RECOVERING)


# ---- RECOVERING: staged return ----

def test_staged_shares_then_closed():
    breaker, clock, events = make_breaker()
    to_recovering(breaker, clock)
    assert breaker.share == 0.1
    assert admitted(breaker, 100) == 10
    clock.jump(5.0)
    assert breaker.share == 0.5
    assert admitted(breaker, 100) == 50
    clock.jump(5.0)
    assert breaker.share == 1.0
    assert admitted(breaker, 100) == 100
    assert breaker.state is RECOVERING
    clock.jump(5.0)
    assert breaker.state is CLOSED
    assert [event[1:3] for event in events] == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, RECOVERING),
                                                (RECOVERING, CLOSED)]


def test_staged_admission_is_spread_and_admits_the_first_call():
    breaker, clock, _ = make_breaker()
    to_recovering(breaker, clock)
    pattern = [breaker.allow() for _ in range(30)]
    assert [i for i, ok in enumerate(pattern) if ok] == [0, 10, 20]
    assert breaker.rejected >= 27


def test_idle_recovery_walks_through_all_stages():
    breaker, clock, _ = make_breaker()
    to_recovering(breaker, clock)
    clock.jump(60.0)
    assert breaker.state is CLOSED


@pytest.mark.parametrize("latency_ms, ok", [(SLOW_MS, True), (FAST_MS, False)])
def test_trip_during_recovery(latency_ms, ok):
    breaker, clock, events = make_breaker()
    to_recovering(breaker, clock)
    # At 10 % the min_samples of 10 scale down to 1: one bad call is evidence enough.
    assert breaker.allow()
    breaker.record(latency_ms, ok)
    assert breaker.state is OPEN
    assert events[-1][1:3] == (RECOVERING, OPEN)


def test_recovery_starts_from_a_fresh_window():
    breaker, clock, _ = make_breaker(cooldown_s=1.0)  # the slow calls that tripped it are still in the window
    to_recovering(breaker, clock)
    assert breaker.allow()
    breaker.record(FAST_MS, ok=True)
    assert breaker.state is RECOVERING


def test_late_results_while_open_are_ignored():
    breaker, _, _ = make_breaker()
    trip(breaker)
    breaker.record(FAST_MS, ok=True)
    assert breaker.state is OPEN


# ---- breaker.call and fallback ----

def test_call_times_with_the_clock_and_raises_breaker_open():
    async def scenario():
        breaker, clock, _ = make_breaker(min_samples=1)

        async def slow(request):
            await clock.sleep(0.5)
            return request * 2

        task = asyncio.create_task(breaker.call(slow, 21))
        await settle()
        await clock.advance(0.5)
        assert await task == 42
        assert breaker.state is OPEN  # 500 ms > 100 ms, one sample needed
        with pytest.raises(BreakerOpen) as caught:
            await breaker.call(slow, 1)
        assert caught.value.code == "breaker_open" and isinstance(caught.value, CitadelError)
        assert caught.value.breaker == "reranker"

    asyncio.run(scenario())


def test_call_counts_exceptions_as_errors_and_reraises():
    async def scenario():
        breaker, _, _ = make_breaker(min_samples=2)

        async def broken(request):
            raise ConnectionError("down")

        for _ in range(2):
            with pytest.raises(ConnectionError):
                await breaker.call(broken, None)
        assert breaker.state is OPEN

    asyncio.run(scenario())


def test_cancelled_call_counts_only_when_already_slow():
    async def scenario():
        breaker, clock, _ = make_breaker(min_samples=1)

        async def hang(request):
            await clock.sleep(60)

        for elapsed, expected in ((0.05, CLOSED), (0.2, OPEN)):
            task = asyncio.create_task(breaker.call(hang, None))
            await settle()
            await clock.advance(elapsed)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert breaker.state is expected

    asyncio.run(scenario())


def test_fallback_degrades_visibly():
    async def scenario():
        breaker, _, _ = make_breaker(min_samples=1)
        calls = []

        async def primary(request):
            calls.append(request)
            if request == "bad":
                raise RuntimeError("reranker crashed")
            return "ranked"

        async def fallback(request):
            return "unranked"

        guarded = with_fallback(breaker, primary, fallback)
        assert await guarded.call("ok") == ("ranked", False)
        assert await guarded.call("bad") == ("unranked", True)  # trips the breaker (1 of 2 failed)
        assert breaker.state is OPEN
        assert await guarded.call("ok") == ("unranked", True)
        assert calls == ["ok", "bad"]  # the open breaker kept the primary out of it
        assert guarded.name == "reranker" and guarded.degraded == 2
        assert isinstance(guarded.last_error, BreakerOpen)

    asyncio.run(scenario())


def test_make_breakers_from_config():
    seen = []
    breakers = make_breakers(ResilienceConfig(), FakeClock(), lambda *event: seen.append(event))
    assert set(breakers) >= {"generator", "reranker", "embedder", "catalog", "cache"}
    assert breakers["cache"].settings.p95_threshold_ms == 200.0
    assert all(breaker.state is CLOSED for breaker in breakers.values())


# ---- hedging ----

class Replica:
    """A fake replica: answers after `latency_s` on the fake clock, records starts and cancellations."""

    def __init__(self, name, clock, latency_s, fail=False):
        self.name, self.clock, self.latency_s, self.fail = name, clock, latency_s, fail
        self.starts, self.cancelled = [], 0

    async def __call__(self, request):
        self.starts.append(self.clock.now())
        try:
            await self.clock.sleep(self.latency_s)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.fail:
            raise ConnectionError(f"{self.name} failed")
        return f"{self.name}:{request}"


async def run_call(clock, hedged, request, advance_s):
    task = asyncio.create_task(hedged.call(request))
    await settle()
    await clock.advance(advance_s)
    return await task


def test_fast_primary_sends_no_hedge():
    async def scenario():
        clock = FakeClock()
        a, b = Replica("a", clock, 0.001), Replica("b", clock, 0.001)
        hedged = Hedged(lambda exclude: b if a in exclude else a, clock, min_delay_ms=5.0, budget_share=1.0)
        assert await run_call(clock, hedged, 1, 0.01) == "a:1"
        assert hedged.stats.hedges == 0 and b.starts == []

    asyncio.run(scenario())


def test_slow_primary_is_hedged_after_the_delay_and_the_hedge_wins():
    async def scenario():
        clock = FakeClock()
        a, b = Replica("a", clock, 0.020), Replica("b", clock, 0.020)
        hedged = Hedged(lambda exclude: b if a in exclude else a, clock, min_delay_ms=30.0, budget_share=0.1)
        for i in range(10):  # 10 requests earn one hedge; 20 ms is under the 30 ms floor, so none is sent
            await run_call(clock, hedged, i, 0.020)
        assert hedged.stats.hedges == 0 and hedged.delay_s() == pytest.approx(0.030)
        a.latency_s = 1.0  # the primary stalls
        task = asyncio.create_task(hedged.call("q"))
        await settle()
        start = clock.now()
        await clock.advance(0.029)
        assert b.starts == []  # not hedged yet
        await clock.advance(0.002)
        assert b.starts == [pytest.approx(start + 0.030)]  # hedged at the delay, to the other replica
        await clock.advance(0.020)
        assert await task == "b:q"
        await settle()
        assert a.cancelled == 1  # the loser was cancelled
        assert (hedged.stats.requests, hedged.stats.hedges, hedged.stats.hedge_wins,
                hedged.stats.cancelled) == (11, 1, 1, 1)

    asyncio.run(scenario())


def test_hedge_delay_follows_the_observed_quantile_above_the_floor():
    async def scenario():
        clock = FakeClock()
        a = Replica("a", clock, 0.010)
        hedged = Hedged([a], clock, quantile=0.95, min_delay_ms=50.0, budget_share=0.0)
        for i in range(18):
            await run_call(clock, hedged, i, 0.010)
        assert hedged.delay_s() == pytest.approx(0.050)  # p95 of 10 ms is under the floor
        a.latency_s = 0.100
        for i in range(2):  # 2 of 20 slow: the nearest-rank p95 (19th of 20) is slow
            await run_call(clock, hedged, i, 0.100)
        assert hedged.delay_s() == pytest.approx(0.100, rel=0.011)

    asyncio.run(scenario())


def test_primary_wins_when_faster_than_the_hedge():
    async def scenario():
        clock = FakeClock()
        a, b = Replica("a", clock, 0.030), Replica("b", clock, 1.0)
        hedged = Hedged(lambda exclude: b if a in exclude else a, clock, min_delay_ms=10.0, budget_share=1.0)
        assert await run_call(clock, hedged, 1, 0.030) == "a:1"
        await settle()
        assert hedged.stats.hedges == 1 and hedged.stats.hedge_wins == 0 and b.cancelled == 1

    asyncio.run(scenario())


def test_no_hedge_when_budget_is_spent():
    async def scenario():
        clock = FakeClock()
        a, b = Replica("a", clock, 1.0), Replica("b", clock, 0.001)
        hedged = Hedged(lambda exclude: b if a in exclude else a, clock, min_delay_ms=5.0, budget_share=0.1)
        assert await run_call(clock, hedged, 1, 1.0) == "a:1"  # 1 request: 0.1 hedges, not enough for one
        assert hedged.stats.hedges == 0 and hedged.stats.denied == 1 and b.starts == []

    asyncio.run(scenario())


def test_failure_before_the_delay_propagates_without_hedging():
    async def scenario():
        clock = FakeClock()
        a, b = Replica("a", clock, 0.001, fail=True), Replica("b", clock, 0.001)
        hedged = Hedged(lambda exclude: b if a in exclude else a, clock, min_delay_ms=5.0, budget_share=1.0)
        with pytest.raises(ConnectionError):
            await run_call(clock, hedged, 1, 0.01)
        assert hedged.stats.hedges == 0 and b.starts == []

    asyncio.run(scenario())


def test_failed_hedge_leaves_the_primary_to_answer():
    async def scenario():
        clock = FakeClock()
        a, b = Replica("a", clock, 0.1), Replica("b", clock, 0.001, fail=True)
        hedged = Hedged(lambda exclude: b if a in exclude else a, clock, min_delay_ms=5.0, budget_share=1.0)
        assert await run_call(clock, hedged, 1, 0.1) == "a:1"
        assert hedged.stats.hedges == 1 and hedged.stats.hedge_wins == 0

    asyncio.run(scenario())


def test_single_replica_is_never_hedged():
    async def scenario():
        clock = FakeClock()
        a = Replica("a", clock, 0.1)
        hedged = Hedged([a], clock, min_delay_ms=5.0, budget_share=1.0)
        assert await run_call(clock, hedged, 1, 0.1) == "a:1"
        assert hedged.stats.hedges == 0 and len(a.starts) == 1

    asyncio.run(scenario())


def test_cancelling_the_hedged_call_cancels_both_replicas():
    async def scenario():
        clock = FakeClock()
        a, b = Replica("a", clock, 1.0), Replica("b", clock, 1.0)
        hedged = Hedged(lambda exclude: b if a in exclude else a, clock, min_delay_ms=5.0, budget_share=1.0)
        task = asyncio.create_task(hedged.call(1))
        await settle()
        await clock.advance(0.01)
        task.cancel()
        await settle()
        assert task.cancelled() and a.cancelled == 1 and b.cancelled == 1

    asyncio.run(scenario())


def test_round_robin_skips_excluded():
    a, b, c = object(), object(), object()
    pick = RoundRobin([a, b, c])
    assert [pick(()), pick(()), pick(())] == [a, b, c]
    assert pick((a,)) is b and pick((a, b, c)) is None


# ---- deadlines ----

def test_deadline_remaining_child_and_header():
    clock = FakeClock(start=50.0)
    deadline = Deadline.after(2.0, clock)
    assert deadline.remaining() == 2.0 and not deadline.expired()
    assert deadline.child(0.5).at == 50.5 and deadline.child(9.0).at == 52.0
    header = deadline.to_header(wall_now=1_700_000_000.0)
    assert header == "1700000002.000000"
    clock.jump(1.0)  # another process on another clock one second later
    assert Deadline.from_header(header, clock, wall_now=1_700_000_001.0).remaining() == pytest.approx(1.0)
    clock.jump(1.0)
    assert deadline.expired() and deadline.remaining() == 0.0
    assert DEADLINE_HEADER == "X-Citadel-Deadline"


@pytest.mark.parametrize("value", ["soon", "", "nan", "inf"])
def test_bad_deadline_header_is_rejected(value):
    with pytest.raises(InvalidDeadline):
        Deadline.from_header(value, FakeClock())


def test_deadline_run_returns_or_cancels():
    async def scenario():
        clock = FakeClock()
        fast, slow = Replica("fast", clock, 0.1), Replica("slow", clock, 5.0)
        deadline = Deadline.after(1.0, clock)
        task = asyncio.create_task(deadline.run(fast(1)))
        await settle()
        await clock.advance(0.1)
        assert await task == "fast:1"
        task = asyncio.create_task(deadline.run(slow(1)))
        await settle()
        await clock.advance(0.9)
        with pytest.raises(DeadlineExceeded) as caught:
            await task
        assert caught.value.code == "deadline_exceeded" and slow.cancelled == 1
        with pytest.raises(DeadlineExceeded):
            await deadline.run(fast(2))  # already past: the work never starts
        assert len(fast.starts) == 1

    asyncio.run(scenario())


def test_deadline_run_does_not_mistake_the_work_timing_out():
    async def scenario():
        async def work():
            raise TimeoutError("downstream's own timeout")

        with pytest.raises(TimeoutError) as caught:
            await Deadline.after(1.0, FakeClock()).run(work())
        assert not isinstance(caught.value, DeadlineExceeded)

    asyncio.run(scenario())


def test_deadline_on_the_real_clock():
    async def scenario():
        clock = MonotonicClock()
        with pytest.raises(DeadlineExceeded):
            await Deadline.after(0.01, clock).run(asyncio.sleep(5))
        assert await Deadline.after(5, clock).run(asyncio.sleep(0, result="ok")) == "ok"

    asyncio.run(scenario())


# ---- retry budget and the retry layer ----

def test_retry_budget_share_and_window():
    clock = FakeClock()
    budget = RetryBudget(0.1, clock, window_s=10.0)
    for _ in range(9):
        budget.record_request()
    assert not budget.can_retry()  # 1 <= 0.9 fails
    budget.record_request()
    assert budget.can_retry()
    assert not budget.can_retry()  # spent
    clock.jump(10.0)  # the requests and the spend age out together
    assert not budget.can_retry()
    for _ in range(20):
        budget.record_request()
    assert budget.can_retry() and budget.can_retry() and not budget.can_retry()
    assert (budget.requests_total, budget.spent_total) == (30, 3)


class Flaky:
    def __init__(self, failures, error=ConnectionError):
        self.failures, self.error, self.calls = failures, error, 0

    async def __call__(self, request):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error("flaky")
        return request


def test_retry_within_budget_and_attempts():
    async def scenario():
        clock = FakeClock()
        flaky = Flaky(failures=1)
        assert await retry(flaky, "r", RetryBudget(1.0, clock), max_attempts=2) == "r" and flaky.calls == 2
        flaky = Flaky(failures=5)
        with pytest.raises(ConnectionError):
            await retry(flaky, "r", RetryBudget(1.0, clock), max_attempts=3)
        assert flaky.calls == 1 + 1  # one request earns one retry at share 1.0, though 3 attempts are allowed
        budget = RetryBudget(1.0, clock)
        for _ in range(5):
            budget.record_request()
        flaky = Flaky(failures=5)
        with pytest.raises(ConnectionError):
            await retry(flaky, "r", budget, max_attempts=3)
        assert flaky.calls == 3  # max_attempts, budget to spare

    asyncio.run(scenario())


def test_retry_stops_when_budget_empty():
    async def scenario():
        budget = RetryBudget(0.1, FakeClock())
        flaky = Flaky(failures=1)
        with pytest.raises(ConnectionError):
            await retry(flaky, "r", budget, max_attempts=3)
        assert flaky.calls == 1

    asyncio.run(scenario())


@pytest.mark.parametrize("error", [ValueError, DeadlineExceeded, lambda message: BreakerOpen("x", OPEN)])
def test_retry_skips_errors_not_worth_retrying(error):
    async def scenario():
        flaky = Flaky(failures=1, error=error)
        with pytest.raises(Exception):
            await retry(flaky, "r", RetryBudget(1.0, FakeClock()), max_attempts=3,
                        retry_on=(ConnectionError, CitadelError))
        assert flaky.calls == 1

    asyncio.run(scenario())


def test_retry_stops_at_the_deadline():
    async def scenario():
        clock = FakeClock()
        flaky = Flaky(failures=1)
        wrapper = Retrying(flaky, RetryBudget(1.0, clock), max_attempts=3)
        with pytest.raises(ConnectionError):
            await wrapper.call("r", deadline=Deadline(clock.now(), clock))
        assert flaky.calls == 1
        assert await wrapper.call("r") == "r"

    asyncio.run(scenario())


# ---- sliding-window quantiles ----

def test_sketch_exact_for_steady_latency_and_windowed():
    clock = FakeClock()
    sketch = WindowedQuantiles(window_s=10.0)
    assert sketch.quantile(0.95, clock.now()) is None and sketch.error_rate(clock.now()) is None
    for _ in range(50):
        sketch.observe(42.0, clock.now())
    sketch.observe(42.0, clock.now(), ok=False)
    assert sketch.quantile(0.5, clock.now()) == 42.0 and sketch.quantile(0.99, clock.now()) == 42.0
    assert sketch.count(clock.now()) == 51 and sketch.errors(clock.now()) == 1
    clock.jump(5.0)
    sketch.observe(7.0, clock.now())
    clock.jump(5.0)  # the 42s left the window, the 7 has not
    assert sketch.count(clock.now()) == 1 and sketch.quantile(0.95, clock.now()) == 7.0
    clock.jump(100.0)
    assert sketch.count(clock.now()) == 0 and sketch.quantile(0.5, clock.now()) is None


def test_sketch_relative_error_and_bounded_memory():
    sketch = WindowedQuantiles(window_s=10.0)
    values = [0.5 * 1.07 ** i for i in range(200)] * 50  # 10 000 samples spanning 0.5 ms .. 360 s
    for value in values:
        sketch.observe(value, 1.0)
    exact = sorted(values)
    for q in (0.5, 0.9, 0.95, 0.99):
        truth = exact[math.ceil(q * len(exact)) - 1]
        assert sketch.quantile(q, 1.0) == pytest.approx(truth, rel=0.011)
    assert len(sketch._bins) <= 200  # one bin per distinct value at most, not one entry per sample
