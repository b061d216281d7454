"""Clocks: the real monotonic one, and a fake one that tests move by hand (no real sleeps).

Every resilience wrapper takes a clock, so hedge delays, breaker cooldowns and deadlines can be
tested exactly: a test starts calls as tasks and then `await clock.advance(dt)`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

# Loop turns `FakeClock.advance` gives woken tasks: a wake-up travels sleep -> asyncio.wait -> the
# waiting wrapper -> the tasks it starts, a handful of hops; turns are cheap, so leave plenty.
SETTLE_TURNS = 20


class Clock(Protocol):
    """Seconds on a monotonic scale, and a sleep on the same scale."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    """The real clock: `time.monotonic` and `asyncio.sleep`."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """Time moves only when a test calls `advance`; sleepers wake in wake-up order."""

    def __init__(self, start: float = 0.0):
        self._now = float(start)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()  # breaks ties between equal wake-up times, first come first woken

    def now(self) -> float:
        return self._now

    @property
    def sleepers(self) -> int:
        """Sleeps still waiting (cancelled ones included until time passes them)."""
        return sum(1 for _, _, fut in self._sleepers if not fut.done())

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._order), future))
        await future

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking each due sleeper at its own wake-up time and letting it run."""
        target = self._now + max(0.0, seconds)
        while self._sleepers and self._sleepers[0][0] <= target:
            wake_at, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, wake_at)
            if not future.done():  # a cancelled sleep has a done future
                future.set_result(None)
                await settle()
        self._now = target
        await settle()

    def jump(self, seconds: float) -> None:
        """Move time forward outside an event loop, for code that only reads `now()`.

        Refuses to pass a pending sleeper, which only `advance` can wake.
        """
        target = self._now + max(0.0, seconds)
        if any(wake_at <= target and not fut.done() for wake_at, _, fut in self._sleepers):
            raise RuntimeError("a sleeper is due before the target time: use `await advance()`")
        self._now = target


async def settle(turns: int = SETTLE_TURNS) -> None:
    """Give the event loop a few turns so ready tasks run (tests and FakeClock use it)."""
    for _ in range(turns):
        await asyncio.sleep(0)


class ClockTimeout(TimeoutError):
    """Raised by `wait_for` itself, so callers can tell it from a TimeoutError the work raised."""


def consume(task: asyncio.Future[Any]) -> None:
    """Done-callback for tasks nobody awaits: read the outcome so asyncio does not warn about it."""
    if not task.cancelled():
        task.exception()


async def wait_for(clock: Clock, awaitable: Awaitable[T], timeout_s: float) -> T:
    """Like `asyncio.wait_for`, but timed by `clock`: raise ClockTimeout and cancel the work on expiry."""
    work = asyncio.ensure_future(awaitable)
    timer = asyncio.ensure_future(clock.sleep(timeout_s))
    try:
        await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # we were cancelled: take the work down with us
        work.cancel()
        timer.cancel()
        work.add_done_callback(consume)
        raise
    timer.cancel()
    if work.done():
        return work.result()
    work.cancel()
    # Let the work finish its cleanup, as asyncio.wait_for does; asyncio.wait never raises the
    # work's CancelledError, so our own cancellation still propagates.
    await asyncio.wait({work})
    consume(work)
    raise ClockTimeout(f"no result within {timeout_s:.3f} s")
