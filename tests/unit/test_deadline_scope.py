"""The one deadline: a scope opened at the edge is what every hop below bounds itself by,
on any thread the context is copied to, and a hop never starts after it."""

from __future__ import annotations

import contextvars
import threading

import pytest

from citadel.errors import DeadlineExceeded
from citadel.resilience.deadline import (MIN_TIME_LEFT_S, Deadline, check_deadline, current_deadline,
                                         deadline_scope, time_left)
from citadel.resilience.guards import Guard


class FakeClock:
    """A clock that moves only when the test says (synchronously: these tests run no event loop)."""

    def __init__(self) -> None:
        self._now = 0.0

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def test_a_scope_is_current_inside_and_gone_after():
    clock = FakeClock()
    assert current_deadline() is None and time_left(5.0) == 5.0
    with deadline_scope(Deadline.after(2.0, clock)) as deadline:
        assert current_deadline() is deadline
        assert time_left(5.0) == 2.0 and time_left(1.0) == 1.0  # the hop's own timeout when smaller
        clock.advance(1.5)
        assert time_left(5.0) == pytest.approx(0.5)
        clock.advance(1.0)
        assert time_left(5.0) == MIN_TIME_LEFT_S  # never zero: a zero timeout means "none" to some clients
        with pytest.raises(DeadlineExceeded):
            check_deadline()
    assert current_deadline() is None


def test_an_inner_scope_never_extends_the_outer_one():
    clock = FakeClock()
    with deadline_scope(Deadline.after(1.0, clock)) as outer:
        with deadline_scope(Deadline.after(10.0, clock)) as inner:
            assert inner is outer and time_left(30.0) == 1.0
        with deadline_scope(Deadline.after(0.5, clock)) as tighter:
            assert time_left(30.0) == 0.5 and tighter is not outer
        assert current_deadline() is outer


def test_the_deadline_follows_a_copied_context_onto_a_worker_thread():
    seen = []
    with deadline_scope(Deadline.after(3.0, FakeClock())) as deadline:
        context = contextvars.copy_context()
        worker = threading.Thread(target=context.run, args=(lambda: seen.append(current_deadline()),))
        worker.start()
        worker.join()
    assert seen == [deadline]


def test_epoch_seconds_carry_a_deadline_to_another_process():
    clock = FakeClock()
    deadline = Deadline.after(4.0, clock)
    epoch = deadline.epoch(wall_now=1_700_000_000.0)
    assert epoch == pytest.approx(1_700_000_004.0)
    there = Deadline.from_epoch(epoch, FakeClock(), wall_now=1_700_000_001.0)  # one second in transit
    assert there.remaining() == pytest.approx(3.0)


def test_a_guarded_hop_does_not_start_after_the_deadline():
    calls = []
    clock = FakeClock()
    with deadline_scope(Deadline.after(1.0, clock)):
        assert Guard().call(lambda: calls.append("first") or "ok") == "ok"
        clock.advance(2.0)
        with pytest.raises(DeadlineExceeded):
            Guard().call(lambda: calls.append("late"))
    assert calls == ["first"]
