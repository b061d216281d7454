"""Every State backend runs the state suite (tests/conformance/suites/state.py): in process, and Redis
against a real redis-server started for the session (tests/redis_server.py; CI installs the Debian
package; set CITADEL_REQUIRE_REDIS=1 to make its absence a failure instead of a skip), each test on
its own key prefix. The tests that are not about one backend follow.
"""

from __future__ import annotations

import json

import pytest

from citadel.config import StateConfig
from citadel.state import StateUnavailable, answer_cache_key
from citadel.state.base import IdempotencyStatus
from citadel.state.factory import make_state
from tests.conformance.suites.state import StateConformance, clock, START, UNREACHABLE_REDIS  # noqa: F401 (clock: fixtures)
from tests.settable_clock import SettableClock


class TestMemoryState(StateConformance):
    kind = "memory"

    @pytest.fixture
    def backend(self):
        return ""


class TestRedisState(StateConformance):
    kind = "redis"

    @pytest.fixture
    def backend(self, redis_url):
        return redis_url


def test_cache_key_normalises_question_but_not_acl_or_versions():
    base = answer_cache_key("t1", "acl-a", "What is the travel policy?", "seg-1")
    assert base == answer_cache_key("t1", "acl-a", "  what IS the\ttravel   policy ?!", "seg-1")
    assert len(base) == 64 and int(base, 16) >= 0  # sha256 hex
    assert base != answer_cache_key("t1", "acl-b", "What is the travel policy?", "seg-1")
    assert base != answer_cache_key("t1", "acl-a", "What is the travel policy?", "seg-2")
    assert base != answer_cache_key("t2", "acl-a", "What is the travel policy?", "seg-1")
    assert base != answer_cache_key("t1", "acl-a", "What is the expense policy?", "seg-1")
    assert base != answer_cache_key("t1", "acl-a", "What is the travel policy?", "seg-1", "b-0123456789ab")


def test_idempotency_status_values_are_the_stored_strings():
    """A str enum: JSON, logs and comparisons with the old literals read exactly as before."""
    assert [s.value for s in IdempotencyStatus] == ["new", "in_progress", "done", "conflict"]
    assert IdempotencyStatus.DONE == "done" and str(IdempotencyStatus.DONE) == f"{IdempotencyStatus.DONE}" == "done"
    assert isinstance(IdempotencyStatus.NEW, str)
    assert json.dumps({"s": IdempotencyStatus.IN_PROGRESS}) == '{"s": "in_progress"}'
    assert IdempotencyStatus("conflict") is IdempotencyStatus.CONFLICT


def test_unreachable_redis_raises_state_unavailable():
    state = make_state(StateConfig(redis_url=UNREACHABLE_REDIS), clock=SettableClock(START))
    assert state.backend == "redis"
    calls = [
        lambda: state.cache.get("k"),
        lambda: state.cache.put("k", {"n": 1}, "t1", ["a"]),
        lambda: state.cache.invalidate_documents("t1", ["a"]),
        lambda: state.cache.invalidate_tenant("t1"),
        lambda: state.budgets.charge("t1", "u1"),
        lambda: state.budgets.usage("t1", "u1"),
        lambda: state.idempotency.begin("s", "k", "fp"),
        lambda: state.idempotency.complete("s", "k", {}, 200),
        lambda: state.idempotency.release("s", "k"),
    ]
    try:
        for call in calls:
            with pytest.raises(StateUnavailable) as raised:
                call()
            assert raised.value.code == "state_unavailable"
    finally:
        state.close()
