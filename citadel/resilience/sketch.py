"""Sliding-window statistics in bounded memory: counters and a streaming quantile estimator.

The window is a ring of `buckets` time slots (each window_s / buckets long). A slot is cleared when
time comes back round to it, so memory never grows with traffic and old samples age out without a
scan. The window therefore moves in whole slots: it spans between window_s - slot and window_s.

Quantiles use log-spaced bins (as DDSketch does): every value falls in a bin whose representative is
within `relative_error` of it, and estimates are clamped to the window's exact min and max, so a
steady downstream reads back its exact latency.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

S = TypeVar("S")

DEFAULT_BUCKETS = 10  # 10 slots: the window moves in tenths
DEFAULT_RELATIVE_ERROR = 0.01  # 1 % on any quantile is far below the gap between "fast" and "slow"
MIN_VALUE_MS = 1e-3  # everything at or below 1 µs shares the first bin
MAX_VALUE_MS = 86_400_000.0  # a day: larger values share the last bin, which bounds the bin count


class _Ring(Generic[S]):
    """A ring of per-slot states covering the last `window_s` seconds."""

    def __init__(self, window_s: float, buckets: int, new_slot: Callable[[], S], on_expire: Callable[[S], None]):
        if window_s <= 0 or buckets < 1:
            raise ValueError("window_s must be > 0 and buckets >= 1")
        self._slot_s = window_s / buckets
        self._new_slot = new_slot
        self._on_expire = on_expire
        self._slots: list[S] = [new_slot() for _ in range(buckets)]
        self._head: int | None = None  # index (time // slot_s) of the newest slot

    def _index(self, now: float) -> int:
        return math.floor(now / self._slot_s)

    def advance(self, now: float) -> None:
        """Expire the slots time has moved past. A clock that steps back is held at its newest slot."""
        index = self._index(now)
        if self._head is None:
            self._head = index
            return
        if index <= self._head:
            return
        for step in range(self._head + 1, min(index, self._head + len(self._slots)) + 1):
            position = step % len(self._slots)
            self._on_expire(self._slots[position])
            self._slots[position] = self._new_slot()
        self._head = index

    def current(self, now: float) -> S:
        self.advance(now)
        assert self._head is not None
        return self._slots[self._head % len(self._slots)]

    def live(self, now: float) -> list[S]:
        self.advance(now)
        return list(self._slots)

    def clear(self) -> None:
        self._slots = [self._new_slot() for _ in self._slots]
        self._head = None


class WindowedCounter:
    """A count of events over the last `window_s` seconds."""

    def __init__(self, window_s: float, buckets: int = DEFAULT_BUCKETS):
        self._total = 0
        self._ring: _Ring[list[int]] = _Ring(window_s, buckets, lambda: [0], self._expire)

    def _expire(self, slot: list[int]) -> None:
        self._total -= slot[0]

    def add(self, now: float, amount: int = 1) -> None:
        self._ring.current(now)[0] += amount
        self._total += amount

    def total(self, now: float) -> int:
        self._ring.advance(now)
        return self._total


@dataclass
class _Slot:
    bins: dict[int, int] = field(default_factory=dict)
    count: int = 0
    errors: int = 0
    low: float = math.inf
    high: float = -math.inf


class WindowedQuantiles:
    """Latency quantiles and error counts over the last `window_s` seconds."""

    def __init__(self, window_s: float, buckets: int = DEFAULT_BUCKETS,
                 relative_error: float = DEFAULT_RELATIVE_ERROR):
        if not 0 < relative_error < 1:
            raise ValueError("relative_error must be in (0, 1)")
        self.window_s = window_s
        self._gamma = (1 + relative_error) / (1 - relative_error)
        self._log_gamma = math.log(self._gamma)
        self._max_bin = self._bin(MAX_VALUE_MS)
        self._bins: dict[int, int] = {}  # running sum of the live slots, kept by add/expire
        self._count = 0
        self._errors = 0
        self._ring: _Ring[_Slot] = _Ring(window_s, buckets, _Slot, self._expire)

    def _bin(self, value_ms: float) -> int:
        if value_ms <= MIN_VALUE_MS:
            return 0
        return math.ceil(math.log(value_ms / MIN_VALUE_MS) / self._log_gamma)

    def _value(self, index: int) -> float:
        # The point of (MIN·γ^(i-1), MIN·γ^i] with equal relative distance to both ends.
        return MIN_VALUE_MS * 2 * self._gamma ** index / (self._gamma + 1)

    def _expire(self, slot: _Slot) -> None:
        for index, n in slot.bins.items():
            left = self._bins[index] - n
            if left:
                self._bins[index] = left
            else:
                del self._bins[index]
        self._count -= slot.count
        self._errors -= slot.errors

    def observe(self, value_ms: float, now: float, ok: bool = True) -> None:
        """Record one call's latency (any outcome) and whether it failed."""
        if math.isnan(value_ms):
            raise ValueError("latency is NaN")
        value_ms = max(0.0, value_ms)
        index = min(self._bin(min(value_ms, MAX_VALUE_MS)), self._max_bin)
        slot = self._ring.current(now)
        slot.bins[index] = slot.bins.get(index, 0) + 1
        self._bins[index] = self._bins.get(index, 0) + 1
        slot.count += 1
        self._count += 1
        slot.low = min(slot.low, value_ms)
        slot.high = max(slot.high, value_ms)
        if not ok:
            slot.errors += 1
            self._errors += 1

    def count(self, now: float) -> int:
        self._ring.advance(now)
        return self._count

    def errors(self, now: float) -> int:
        self._ring.advance(now)
        return self._errors

    def error_rate(self, now: float) -> float | None:
        count = self.count(now)
        return self._errors / count if count else None

    def quantile(self, q: float, now: float) -> float | None:
        """The nearest-rank q-quantile of the window (None when it is empty)."""
        if not 0 <= q <= 1:
            raise ValueError("q must be in [0, 1]")
        slots = self._ring.live(now)
        if not self._count:
            return None
        rank = min(self._count, max(1, math.ceil(q * self._count)))
        seen = 0
        for index in sorted(self._bins):
            seen += self._bins[index]
            if seen >= rank:
                break
        low = min(slot.low for slot in slots)
        high = max(slot.high for slot in slots)
        return min(high, max(low, self._value(index)))

    def reset(self) -> None:
        self._bins.clear()
        self._count = 0
        self._errors = 0
        self._ring.clear()
