"""Resilience wrappers around a call (DESIGN.md §5): hedging, latency breakers, one retry layer,
deadlines. Pure asyncio with an injected clock, so they work in any process (Ray or not) and test
without real sleeps."""

from __future__ import annotations

from citadel.config import ResilienceConfig
from citadel.resilience.breaker import (BreakerOpen, BreakerState, Fallback, LatencyBreaker, OnTransition,
                                        with_fallback)
from citadel.resilience.budget import ShareBudget
from citadel.resilience.clock import Clock, FakeClock, MonotonicClock, wait_for
from citadel.resilience.deadline import DEADLINE_HEADER, Deadline, DeadlineExceeded, InvalidDeadline
from citadel.resilience.hedge import Hedged, HedgeStats, NoReplica, RoundRobin
from citadel.resilience.retry import RetryBudget, Retrying, retry
from citadel.resilience.sketch import WindowedCounter, WindowedQuantiles


def make_breakers(config: ResilienceConfig, clock: Clock,
                  on_transition: OnTransition | None = None) -> dict[str, LatencyBreaker]:
    """One breaker per configured downstream."""
    return {name: LatencyBreaker(name, settings, clock, on_transition) for name, settings in config.breakers.items()}


__all__ = [
    "DEADLINE_HEADER", "BreakerOpen", "BreakerState", "Clock", "Deadline", "DeadlineExceeded", "FakeClock",
    "Fallback", "HedgeStats", "Hedged", "InvalidDeadline", "LatencyBreaker", "MonotonicClock", "NoReplica",
    "RetryBudget", "Retrying", "RoundRobin", "ShareBudget", "WindowedCounter", "WindowedQuantiles",
    "make_breakers", "retry", "wait_for", "with_fallback",
]
