"""Deadlines that propagate: a request carries an absolute deadline, each hop takes what is left.

In process a deadline is a point on the injected (monotonic) clock. Across processes it travels as
wall-clock epoch seconds in the `X-Citadel-Deadline` header, since monotonic clocks are not shared
between machines; the conversion happens at the edge, once.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Awaitable
from typing import TypeVar

from citadel.errors import CitadelError
from citadel.resilience.clock import Clock, ClockTimeout, wait_for

T = TypeVar("T")

DEADLINE_HEADER = "X-Citadel-Deadline"
_HEADER_DECIMALS = 6  # microseconds: finer than any clock skew between hosts


class DeadlineExceeded(CitadelError):
    code = "deadline_exceeded"


class InvalidDeadline(CitadelError):
    """A deadline header that is not a finite number of epoch seconds."""

    code = "invalid_deadline"


class Deadline:
    """An absolute deadline `at` on `clock`'s scale."""

    def __init__(self, at: float, clock: Clock):
        self.at = at
        self.clock = clock

    @classmethod
    def after(cls, seconds: float, clock: Clock) -> Deadline:
        return cls(clock.now() + seconds, clock)

    def remaining(self) -> float:
        return max(0.0, self.at - self.clock.now())

    def expired(self) -> bool:
        return self.clock.now() >= self.at

    def child(self, max_s: float) -> Deadline:
        """A deadline for a sub-call: at most `max_s` from now, never later than this one."""
        return Deadline(min(self.at, self.clock.now() + max_s), self.clock)

    def to_header(self, wall_now: float | None = None) -> str:
        """Epoch seconds (as a string) at which the deadline falls; `wall_now` defaults to time.time()."""
        wall = time.time() if wall_now is None else wall_now
        return f"{wall + (self.at - self.clock.now()):.{_HEADER_DECIMALS}f}"

    @classmethod
    def from_header(cls, value: str, clock: Clock, wall_now: float | None = None) -> Deadline:
        try:
            epoch = float(value.strip())
        except (AttributeError, ValueError):
            raise InvalidDeadline(f"{DEADLINE_HEADER} is not a number: {value!r}") from None
        if not math.isfinite(epoch):
            raise InvalidDeadline(f"{DEADLINE_HEADER} is not finite: {value!r}")
        wall = time.time() if wall_now is None else wall_now
        return cls(clock.now() + (epoch - wall), clock)

    async def run(self, awaitable: Awaitable[T]) -> T:
        """Await within the time left; on expiry cancel the work and raise DeadlineExceeded.

        Timed by the deadline's clock (not the loop's, as asyncio.wait_for is) so a FakeClock drives it.
        """
        if self.expired():
            if inspect.iscoroutine(awaitable):
                awaitable.close()  # never started: close it so Python does not warn it was never awaited
            raise DeadlineExceeded("deadline passed before the call")
        try:
            return await wait_for(self.clock, awaitable, self.remaining())
        except ClockTimeout:
            raise DeadlineExceeded(f"deadline passed ({self.at - self.clock.now():+.3f} s)") from None
