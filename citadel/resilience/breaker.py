"""Latency circuit breakers (DESIGN.md §5): trip on slowness as well as on errors, return in stages.

    CLOSED --(p95 or error rate over the window)--> OPEN --(cooldown_s)--> HALF_OPEN
    HALF_OPEN --(slow or failed probe)--> OPEN
    HALF_OPEN --(close_after_probes fast probes in a row)--> RECOVERING
    RECOVERING --(each stage share for stage_duration_s)--> CLOSED
    RECOVERING --(p95 or error rate, min_samples scaled by the share)--> OPEN

A slow downstream hurts as much as a failing one (requests pile up behind it), so the p95 trips the
breaker too. The staged return keeps a recovered but fragile downstream from being flattened by the
whole load at once. Time-driven moves (cooldown over, next stage) happen lazily on the next
`allow`/`record`/`state`, stamped with the time they fell due.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any

from citadel.config import BreakerSettings
from citadel.errors import BreakerOpen
from citadel.resilience.clock import Clock
from citadel.resilience.sketch import WindowedQuantiles

P95 = 0.95
TRANSITION_LOG_SIZE = 256  # recent transitions kept for logs and /debug; older ones drop off
_SHARE_DIGITS = 9  # round n x share before ceil so float noise (0.1 x 30 = 3.0000000000000004) cannot shift admissions
MS = 1000.0


class BreakerState(str, Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"
    RECOVERING = "recovering"


Transition = tuple[float, BreakerState, BreakerState, str]
OnTransition = Callable[[str, BreakerState, BreakerState, str], None]


class LatencyBreaker:
    """A breaker on one downstream. Use `call`, or `allow` + `record` when the caller times the call."""

    def __init__(self, name: str, settings: BreakerSettings, clock: Clock, on_transition: OnTransition | None = None):
        if not settings.stages:
            raise ValueError("breaker stages must not be empty")
        self.name = name
        self.settings = settings
        self._clock = clock
        self._on_transition = on_transition
        self._window = WindowedQuantiles(settings.window_s)
        self._state = BreakerState.CLOSED
        self._since = clock.now()  # start of the current state, or of the current stage when RECOVERING
        self._last_probe: float | None = None
        self._fast_probes = 0
        self._stage = 0
        self._offered = 0  # calls offered in the current stage, for deterministic share admission
        self._transitions: deque[Transition] = deque(maxlen=TRANSITION_LOG_SIZE)
        self.rejected = 0

    @property
    def state(self) -> BreakerState:
        self._tick(self._clock.now())
        return self._state

    @property
    def share(self) -> float:
        """Share of calls admitted now (HALF_OPEN admits spaced probes only, counted as 0)."""
        state = self.state
        if state is BreakerState.CLOSED:
            return 1.0
        if state is BreakerState.RECOVERING:
            return self.settings.stages[self._stage]
        return 0.0

    @property
    def transitions(self) -> list[Transition]:
        return list(self._transitions)

    def _move(self, new: BreakerState, at: float, reason: str) -> None:
        old = self._state
        self._state = new
        self._since = at
        self._last_probe = None
        self._fast_probes = 0
        self._stage = 0
        self._offered = 0
        if new is BreakerState.RECOVERING:
            self._window.reset()  # judge the return on fresh evidence, not on what tripped it
        self._transitions.append((at, old, new, reason))
        if self._on_transition is not None:
            self._on_transition(self.name, old, new, reason)

    def _tick(self, now: float) -> None:
        settings = self.settings
        if self._state is BreakerState.OPEN and now >= self._since + settings.cooldown_s:
            due = self._since + settings.cooldown_s
            self._move(BreakerState.HALF_OPEN, due, f"cooldown {settings.cooldown_s:g} s over")
        while self._state is BreakerState.RECOVERING and now >= self._since + settings.stage_duration_s:
            stage_end = self._since + settings.stage_duration_s
            if self._stage + 1 < len(settings.stages):
                self._stage += 1
                self._since = stage_end
                self._offered = 0
            else:
                self._move(BreakerState.CLOSED, stage_end, f"recovered through stages {settings.stages}")

    def _admitted(self, offered: int, share: float) -> int:
        return math.ceil(round(offered * share, _SHARE_DIGITS))

    def allow(self) -> bool:
        """Whether to send a call now. A True in HALF_OPEN is a probe: `record` its outcome."""
        now = self._clock.now()
        self._tick(now)
        state = self._state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.HALF_OPEN:
            if self._last_probe is None or now - self._last_probe >= self.settings.probe_interval_s:
                self._last_probe = now
                return True
        elif state is BreakerState.RECOVERING:
            # Admit call n when ceil(n x share) grows: exactly the share, spread evenly, first call admitted.
            share = self.settings.stages[self._stage]
            self._offered += 1
            if self._admitted(self._offered, share) > self._admitted(self._offered - 1, share):
                return True
        self.rejected += 1
        return False

    def record(self, latency_ms: float, ok: bool) -> None:
        """Record an admitted call's outcome. Late results arriving while OPEN are ignored."""
        now = self._clock.now()
        self._tick(now)
        settings = self.settings
        if self._state is BreakerState.OPEN:
            return
        if self._state is BreakerState.HALF_OPEN:
            if not ok:
                self._move(BreakerState.OPEN, now, "probe failed")
            elif latency_ms > settings.p95_threshold_ms:
                reason = f"probe slow: {latency_ms:.0f} ms > {settings.p95_threshold_ms:g} ms"
                self._move(BreakerState.OPEN, now, reason)
            else:
                self._fast_probes += 1
                if self._fast_probes >= settings.close_after_probes:
                    self._move(BreakerState.RECOVERING, now, f"{self._fast_probes} fast probes in a row")
            return
        self._window.observe(latency_ms, now, ok)
        reason = self._trip_reason(now)
        if reason:
            self._move(BreakerState.OPEN, now, reason)

    def _trip_reason(self, now: float) -> str | None:
        settings = self.settings
        share = 1.0 if self._state is BreakerState.CLOSED else settings.stages[self._stage]
        # Fewer calls arrive while recovering, so fewer are needed to judge.
        needed = max(1, math.ceil(settings.min_samples * share))
        count = self._window.count(now)
        if count < needed:
            return None
        rate = self._window.error_rate(now)
        if rate is not None and rate >= settings.max_error_rate:
            return f"error rate {rate:.0%} >= {settings.max_error_rate:.0%} over {count} calls"
        p95 = self._window.quantile(P95, now)
        if p95 is not None and p95 > settings.p95_threshold_ms:
            return f"p95 {p95:.0f} ms > {settings.p95_threshold_ms:g} ms over {count} calls"
        return None

    async def call(self, fn: Callable[[Any], Awaitable[Any]], request: Any) -> Any:
        """Call `fn(request)` if admitted (else raise BreakerOpen), timing and recording the outcome.

        An exception counts as an error and propagates. A cancelled call (hedge loser, deadline) is
        recorded only if it already ran past the threshold: that much is certain slowness, anything
        shorter says nothing about the downstream.
        """
        if not self.allow():
            raise BreakerOpen(self.name, self._state)
        start = self._clock.now()
        try:
            response = await fn(request)
        except Exception:
            self.record((self._clock.now() - start) * MS, ok=False)
            raise
        except BaseException:
            elapsed_ms = (self._clock.now() - start) * MS
            if elapsed_ms > self.settings.p95_threshold_ms:
                self.record(elapsed_ms, ok=True)
            raise
        self.record((self._clock.now() - start) * MS, ok=True)
        return response


class Fallback:
    """Fail open with a visible downgrade: the primary through its breaker, else the fallback.

    `call` returns (response, degraded); the caller adds `name` to the response's `degraded` list.
    Only for components that may fail open (reranker, cache, rewriting, secondary generator); those
    guarding confidentiality or side effects call their breaker directly and fail closed.
    """

    def __init__(self, breaker: LatencyBreaker, primary: Callable[[Any], Awaitable[Any]],
                 fallback: Callable[[Any], Awaitable[Any]]):
        self.breaker = breaker
        self.primary = primary
        self.fallback = fallback
        self.degraded = 0
        self.last_error: Exception | None = None

    @property
    def name(self) -> str:
        return self.breaker.name

    async def call(self, request: Any) -> tuple[Any, bool]:
        try:
            return await self.breaker.call(self.primary, request), False
        except Exception as error:
            self.degraded += 1
            self.last_error = error
            return await self.fallback(request), True


def with_fallback(breaker: LatencyBreaker, primary: Callable[[Any], Awaitable[Any]],
                  fallback: Callable[[Any], Awaitable[Any]]) -> Fallback:
    return Fallback(breaker, primary, fallback)
