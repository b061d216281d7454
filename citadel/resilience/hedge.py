"""Hedged reads (DESIGN.md §5): if a replica is slower than usual, ask a second one; first answer wins.

The hedge delay is the downstream's observed latency quantile (p95 by default, floored at
min_delay_ms): ~5 % of calls are slow enough to hedge, and those are the tail that hedging cuts.
Hedges are capped by a `ShareBudget` (no burst allowance) so a slow downstream sees at most
budget_share extra load. Errors are not hedged or retried here: a primary that fails before the
delay propagates its error (the one retry layer is elsewhere); once hedged, the first *successful*
answer wins and the other call is cancelled.

Latency is observed from successful calls only; cancelled losers are not observed (their latency is
unknown), which biases the quantile low a little and so hedges a little more, within the budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Union

from citadel.errors import NoReplica
from citadel.resilience.budget import DEFAULT_WINDOW_S, ShareBudget
from citadel.resilience.clock import Clock, consume
from citadel.resilience.sketch import WindowedQuantiles

Call = Callable[[Any], Awaitable[Any]]
Picker = Callable[[Collection[Call]], Union[Call, None]]
MS = 1000.0


@dataclass
class HedgeStats:
    requests: int = 0
    hedges: int = 0  # second requests sent
    hedge_wins: int = 0  # hedges that answered first
    cancelled: int = 0  # losing calls cancelled
    denied: int = 0  # hedges the budget refused


class RoundRobin:
    """A picker over a fixed list: the next replica in turn that is not excluded."""

    def __init__(self, targets: Sequence[Call]):
        if not targets:
            raise ValueError("no replicas to pick from")
        self._targets = list(targets)
        self._next = 0

    def __call__(self, exclude: Collection[Call]) -> Call | None:
        for offset in range(len(self._targets)):
            index = (self._next + offset) % len(self._targets)
            target = self._targets[index]
            if not any(target is excluded for excluded in exclude):
                self._next = index + 1
                return target
        return None


class Hedged:
    """`await Hedged(...).call(request)`: one replica, plus a hedge to another after the delay."""

    def __init__(self, targets: Sequence[Call] | Picker, clock: Clock, *, quantile: float = 0.95,
                 min_delay_ms: float = 5.0, budget_share: float = 0.10, sketch: WindowedQuantiles | None = None,
                 budget_window_s: float = DEFAULT_WINDOW_S):
        self._pick: Picker = targets if callable(targets) else RoundRobin(targets)
        self._clock = clock
        self.quantile = quantile
        self.min_delay_ms = min_delay_ms
        self.sketch = sketch if sketch is not None else WindowedQuantiles(DEFAULT_WINDOW_S)
        self.budget = ShareBudget(budget_share, clock, budget_window_s)
        self.stats = HedgeStats()

    def delay_s(self) -> float:
        observed = self.sketch.quantile(self.quantile, self._clock.now())
        return max(self.min_delay_ms, observed or 0.0) / MS

    async def _timed(self, target: Call, request: Any) -> Any:
        start = self._clock.now()
        response = await target(request)
        self.sketch.observe((self._clock.now() - start) * MS, self._clock.now())
        return response

    async def call(self, request: Any) -> Any:
        self.stats.requests += 1
        self.budget.record_request()
        primary = self._pick(())
        if primary is None:
            raise NoReplica("no replica to call")
        first = asyncio.ensure_future(self._timed(primary, request))
        timer = asyncio.ensure_future(self._clock.sleep(self.delay_s()))
        tasks = {first}
        try:
            await asyncio.wait({first, timer}, return_when=asyncio.FIRST_COMPLETED)
            timer.cancel()
            if first.done():
                return first.result()  # answered (or failed) in time: nothing to hedge
            if not self.budget.allows():  # asked before picking, so a refused hedge leaves the rotation alone
                self.stats.denied += 1
                return await first
            second_target = self._pick((primary,))
            if second_target is None or not self.budget.try_spend():
                return await first
            self.stats.hedges += 1
            second = asyncio.ensure_future(self._timed(second_target, request))
            tasks.add(second)
            return await self._first_success(first, second)
        finally:
            timer.cancel()
            for task in tasks:
                if not task.done():  # we are returning, raising or being cancelled: stop the rest
                    task.cancel()
                    task.add_done_callback(consume)

    async def _first_success(self, first: asyncio.Future[Any], second: asyncio.Future[Any]) -> Any:
        pending = {first, second}
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in (first, second):  # on a tie prefer the primary
                if task in done and not task.cancelled() and task.exception() is None:
                    self.stats.cancelled += len(pending)
                    if task is second:
                        self.stats.hedge_wins += 1
                    return task.result()
        return first.result()  # both failed: raise the primary's error
