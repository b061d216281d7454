"""A clock the stores under test read through `clock()`: tests move `now` forward instead of sleeping."""

from __future__ import annotations


class SettableClock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now
