"""The one deadline (DESIGN.md §2, §5): a request carries an absolute deadline, each hop takes what is left.

In process a deadline is a point on the injected (monotonic) clock. The edge (the HTTP layer, a run's
step) opens a `deadline_scope`; everything called inside it, on any thread the context is copied to,
finds it with `current_deadline()` and bounds its own call with `time_left(default_s)`. Across
processes it travels as wall-clock epoch seconds (`epoch()` / `from_epoch`; the `X-Citadel-Deadline`
header is the same number as text), since monotonic clocks are not shared between machines.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import math
import time
from collections.abc import Awaitable, Iterator
from typing import TypeVar

from citadel.errors import DeadlineExceeded, InvalidDeadline
from citadel.resilience.clock import Clock, ClockTimeout, MonotonicClock, wait_for

T = TypeVar("T")

DEADLINE_HEADER = "X-Citadel-Deadline"
_HEADER_DECIMALS = 6  # microseconds: finer than any clock skew between hosts
# The least a hop is given even when the deadline has (nearly) passed: a call with a zero or
# negative timeout means "no timeout" to some clients; the hop then fails fast instead.
MIN_TIME_LEFT_S = 0.001


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

    def check(self) -> None:
        """Raise DeadlineExceeded if the deadline has passed (before starting a hop's work)."""
        if self.expired():
            raise DeadlineExceeded("the request's deadline passed before this step started")

    def epoch(self, wall_now: float | None = None) -> float:
        """Wall-clock epoch seconds at which the deadline falls, to hand to another process."""
        wall = time.time() if wall_now is None else wall_now
        return wall + (self.at - self.clock.now())

    @classmethod
    def from_epoch(cls, epoch: float, clock: Clock | None = None, wall_now: float | None = None) -> Deadline:
        """The deadline another process handed over as epoch seconds, on this process's clock."""
        clock = clock or MonotonicClock()
        wall = time.time() if wall_now is None else wall_now
        return cls(clock.now() + (epoch - wall), clock)

    def to_header(self, wall_now: float | None = None) -> str:
        """Epoch seconds (as a string) at which the deadline falls; `wall_now` defaults to time.time()."""
        return f"{self.epoch(wall_now):.{_HEADER_DECIMALS}f}"

    @classmethod
    def from_header(cls, value: str, clock: Clock, wall_now: float | None = None) -> Deadline:
        try:
            epoch = float(value.strip())
        except (AttributeError, ValueError):
            raise InvalidDeadline(f"{DEADLINE_HEADER} is not a number: {value!r}") from None
        if not math.isfinite(epoch):
            raise InvalidDeadline(f"{DEADLINE_HEADER} is not finite: {value!r}")
        return cls.from_epoch(epoch, clock, wall_now)

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


_current: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("citadel_deadline", default=None)


@contextlib.contextmanager
def deadline_scope(deadline: Deadline | None) -> Iterator[Deadline | None]:
    """Make `deadline` the current one inside the block (None: keep whatever is current). A scope
    never extends an enclosing deadline: the earlier of the two holds."""
    outer = _current.get()
    if deadline is None or (outer is not None and outer.at <= deadline.at and outer.clock is deadline.clock):
        yield outer
        return
    token = _current.set(deadline)
    try:
        yield deadline
    finally:
        _current.reset(token)


def current_deadline() -> Deadline | None:
    return _current.get()


def time_left(default_s: float) -> float:
    """Seconds a hop may take: what the current deadline leaves, at most `default_s` (the hop's own
    configured timeout), at least MIN_TIME_LEFT_S. Without a deadline, `default_s`."""
    deadline = _current.get()
    if deadline is None:
        return default_s
    return max(MIN_TIME_LEFT_S, min(default_s, deadline.remaining()))


def check_deadline() -> None:
    """Raise DeadlineExceeded if the current deadline has passed; a no-op without one."""
    deadline = _current.get()
    if deadline is not None:
        deadline.check()
