"""A stage in another deployment receives the request's deadline with every call and the
caller waits no longer than what is left (serving/ray/remote.py, with a fake Serve handle: no Ray)."""

from __future__ import annotations

import pytest

from citadel.resilience.clock import MonotonicClock
from citadel.resilience.deadline import Deadline, deadline_scope


class FakeResponse:
    def __init__(self, value, waits: list):
        self._value = value
        self._waits = waits

    def result(self, timeout_s: float):
        self._waits.append(timeout_s)
        return self._value


class FakeMethod:
    def __init__(self, value, calls: list, waits: list):
        self._value, self._calls, self._waits = value, calls, waits

    def remote(self, *args, **kwargs):
        self._calls.append((args, kwargs))
        return FakeResponse(self._value, self._waits)


class FakeHandle:
    def __init__(self):
        self.calls, self.waits = [], []

    def __getattr__(self, name):
        return FakeMethod(f"{name}-result", self.calls, self.waits)


def test_a_stage_call_carries_the_deadline_and_waits_at_most_what_is_left():
    from serving.ray.remote import RemoteGenerator, adopted_deadline

    handle = FakeHandle()
    generator = RemoteGenerator(handle, timeout_s=30.0)
    with deadline_scope(Deadline.after(2.0, MonotonicClock())):
        assert generator.generate("q?", []) == "generate-result"
    (_, kwargs), = handle.calls
    assert handle.waits[0] <= 2.0
    there = adopted_deadline(kwargs["deadline_epoch"])  # what the generator's replica scopes its work by
    assert 0 < there.remaining() <= 2.0


def test_without_a_deadline_the_stage_waits_its_own_timeout():
    from serving.ray.remote import RemoteReranker, adopted_deadline

    handle = FakeHandle()
    RemoteReranker(handle, timeout_s=7.0).rerank("q?", [], 3)
    (_, kwargs), = handle.calls
    assert kwargs["deadline_epoch"] is None and adopted_deadline(None) is None
    assert handle.waits == [pytest.approx(7.0)]
