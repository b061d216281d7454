"""Load shapes as plain functions of time: how many virtual users run `t` seconds into a run.

`tick(t)` answers what locust's `LoadTestShape.tick` answers, `(users, spawn_rate)`, or None once the
run's time is up, which is what ends a shape run (locust ignores `--run-time` for shapes). The
locustfile wraps the one shape a run asks for in a `LoadTestShape`; these classes import no locust,
so the curves are testable without gevent's monkey patching.

- `DiurnalShape`: a day compressed into the run: a night trough at 02:00, the peak at 14:00.
- `StepShape`: equal steps up to the peak.
- `SpikeShape`: a baseline, then the peak for the middle fifth of the run, then the baseline again.
- `ConstantShape`: the peak from start to end: one load level, what capacity calibration measures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_USERS = 2000
MAX_RUN_S = 120 * 60
DAY_H = 24.0


@dataclass(frozen=True)
class Shape:
    run_time_s: float
    peak_users: int

    def __post_init__(self) -> None:
        if not 0 < self.run_time_s <= MAX_RUN_S:
            raise ValueError(f"run_time_s must be in (0, {MAX_RUN_S}]")
        if not 1 <= self.peak_users <= MAX_USERS:
            raise ValueError(f"peak_users must be in [1, {MAX_USERS}]")

    def users_at(self, t: float) -> int:
        raise NotImplementedError

    def spawn_rate(self) -> float:
        """Users started (or stopped) per second on a change: fast enough that a change lands within
        about a second, so the curve, not the ramp, sets the load."""
        return float(max(1, self.peak_users))

    def tick(self, t: float) -> tuple[int, float] | None:
        if t >= self.run_time_s:
            return None
        return max(1, min(self.peak_users, self.users_at(t))), self.spawn_rate()


@dataclass(frozen=True)
class DiurnalShape(Shape):
    trough: float = 0.1  # the night's share of the peak
    trough_hour: float = 2.0  # the peak is twelve hours later

    def hour_at(self, t: float) -> float:
        return DAY_H * t / self.run_time_s

    def users_at(self, t: float) -> int:
        phase = 2 * math.pi * (self.hour_at(t) - self.trough_hour) / DAY_H
        share = self.trough + (1 - self.trough) * (1 - math.cos(phase)) / 2
        return round(self.peak_users * share)


@dataclass(frozen=True)
class StepShape(Shape):
    steps: int = 5

    def users_at(self, t: float) -> int:
        step = min(self.steps - 1, int(self.steps * t / self.run_time_s))
        return math.ceil(self.peak_users * (step + 1) / self.steps)


@dataclass(frozen=True)
class SpikeShape(Shape):
    baseline: float = 0.2  # share of the peak outside the spike
    spike_from: float = 0.4  # the spike's window, as shares of the run
    spike_to: float = 0.6

    def users_at(self, t: float) -> int:
        share = 1.0 if self.spike_from <= t / self.run_time_s < self.spike_to else self.baseline
        return math.ceil(self.peak_users * share)


@dataclass(frozen=True)
class ConstantShape(Shape):
    def users_at(self, t: float) -> int:
        return self.peak_users


SHAPES: dict[str, type[Shape]] = {"diurnal": DiurnalShape, "step": StepShape, "spike": SpikeShape,
                                  "constant": ConstantShape}


def make_shape(name: str, run_time_s: float, peak_users: int) -> Shape:
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}: one of {', '.join(SHAPES)}")
    return SHAPES[name](run_time_s, peak_users)
