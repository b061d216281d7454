"""Property tests: budgets never exceed their share, however latencies and arrivals fall."""

from __future__ import annotations

import asyncio
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from citadel.config import BreakerSettings
from citadel.resilience import (BreakerState, FakeClock, Hedged, LatencyBreaker, RetryBudget, ShareBudget,
                                WindowedQuantiles, retry)
from citadel.resilience.clock import settle
from citadel.resilience.sketch import DEFAULT_BUCKETS

EXAMPLES = settings(max_examples=50, deadline=None)
WINDOW_S = 10.0
shares = st.sampled_from([0.0, 0.05, 0.1, 0.25, 0.5, 1.0])
gaps_s = st.floats(min_value=0.0, max_value=3.0, allow_nan=False)
latencies_ms = st.floats(min_value=0.0, max_value=2_000.0, allow_nan=False)


@EXAMPLES
@given(share=shares, ops=st.lists(st.tuples(gaps_s, st.booleans()), max_size=200))
def test_budget_never_exceeds_its_share(share, ops):
    clock = FakeClock()
    budget = ShareBudget(share, clock, window_s=WINDOW_S)
    grants = []
    requests = []
    for gap, is_request in ops:
        clock.jump(gap)
        if is_request:
            budget.record_request()
            requests.append(clock.now())
        elif budget.try_spend():
            grants.append(clock.now())
    # cumulative: no burst allowance at all
    assert len(grants) <= share * len(requests)
    # and within the window ending at each grant, which moves in whole slots
    slot_s = WINDOW_S / DEFAULT_BUCKETS

    def in_window(times, at):
        end = math.floor(at / slot_s)
        return sum(1 for t in times if end - DEFAULT_BUCKETS < math.floor(t / slot_s) <= end)

    for at in grants:
        assert in_window(grants, at) <= share * in_window(requests, at)


@EXAMPLES
@given(share=shares, outcomes=st.lists(st.integers(min_value=0, max_value=3), max_size=60), gap=gaps_s)
def test_retries_never_exceed_their_share(share, outcomes, gap):
    """Each request fails `n` times before succeeding; retries stay within the share of requests."""

    async def scenario():
        clock = FakeClock()
        budget = RetryBudget(share, clock, window_s=WINDOW_S)
        attempts = 0
        for failures in outcomes:
            calls = 0

            async def flaky(request):
                nonlocal calls, attempts
                calls += 1
                attempts += 1
                if calls <= failures:
                    raise ConnectionError("flaky")
                return request

            try:
                await retry(flaky, "r", budget, max_attempts=3)
            except ConnectionError:
                pass
            clock.jump(gap)
        retries = attempts - len(outcomes)
        assert retries == budget.spent_total <= share * len(outcomes)

    asyncio.run(scenario())


@EXAMPLES
@given(share=shares, traffic=st.lists(st.tuples(latencies_ms, latencies_ms, st.floats(0.0, 500.0)), max_size=40),
       min_delay_ms=st.floats(0.0, 100.0))
def test_hedges_never_exceed_their_share(share, traffic, min_delay_ms):
    """Requests arrive (possibly overlapping) with arbitrary primary and hedge latencies."""

    async def scenario():
        clock = FakeClock()
        latency = {}

        def replica(name):
            async def call(request):
                await clock.sleep(latency[request][name] / 1000.0)
                return name
            return call

        a, b = replica(0), replica(1)
        hedged = Hedged([a, b], clock, min_delay_ms=min_delay_ms, budget_share=share)
        tasks = []
        for i, (first_ms, second_ms, gap_ms) in enumerate(traffic):
            await clock.advance(gap_ms / 1000.0)
            latency[i] = {0: first_ms, 1: second_ms} if i % 2 == 0 else {1: first_ms, 0: second_ms}
            tasks.append(asyncio.create_task(hedged.call(i)))
            await settle()
        await clock.advance(10.0)  # longer than any call
        assert all(task.done() for task in tasks)
        for task in tasks:
            assert task.result() in (0, 1)
        stats = hedged.stats
        assert stats.requests == len(traffic)
        assert stats.hedges <= share * stats.requests
        assert stats.hedge_wins <= stats.hedges and stats.cancelled <= stats.hedges

    asyncio.run(scenario())


@EXAMPLES
@given(share=st.floats(0.01, 1.0), offered=st.integers(1, 500))
def test_recovering_admits_the_stage_share(share, offered):
    clock = FakeClock()
    breaker = LatencyBreaker("x", BreakerSettings(min_samples=1, close_after_probes=1, stages=[share, 1.0]), clock)
    breaker.record(latency_ms=0.0, ok=False)  # trips: one sample, all failed
    clock.jump(breaker.settings.cooldown_s)
    assert breaker.allow()
    breaker.record(latency_ms=0.0, ok=True)  # one fast probe
    assert breaker.state is BreakerState.RECOVERING
    admitted = sum(breaker.allow() for _ in range(offered))
    assert admitted == math.ceil(round(offered * share, 9))


@EXAMPLES
@given(values=st.lists(st.floats(0.01, 100_000.0), min_size=1, max_size=300), q=st.floats(0.0, 1.0))
def test_sketch_quantile_within_relative_error(values, q):
    sketch = WindowedQuantiles(window_s=WINDOW_S)
    for value in values:
        sketch.observe(value, 0.0)
    exact = sorted(values)[max(1, math.ceil(q * len(values))) - 1]
    estimate = sketch.quantile(q, 0.0)
    assert abs(estimate - exact) <= 0.0101 * exact
