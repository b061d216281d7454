"""Conformance suite for serving state (DESIGN.md §7): the in-process and Redis backends behave the same.

The Redis half runs against a real redis-server started for the session (tests/redis_server.py) (CI installs the Debian package;
set CITADEL_REQUIRE_REDIS=1 to make its absence a failure instead of a skip). Time is a fake clock, so
TTLs and UTC days are tested without sleeping; each test gets its own key prefix on the shared server.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis

from citadel.config import StateConfig
from citadel.state import (
    AnswerCache,
    BudgetStore,
    IdempotencyStore,
    State,
    StateUnavailable,
    answer_cache_key,
    make_state,
)
from citadel.state.base import SECONDS_PER_DAY, IdempotencyResult, IdempotencyStatus
from tests.settable_clock import SettableClock

UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"  # port 1: nothing listens, the connection is refused at once
START = 20_000 * SECONDS_PER_DAY + 3_600.0  # 01:00 UTC on some day
TTL_S = 100.0
THREADS, CHARGES_PER_THREAD, CONCURRENT_LIMIT = 20, 5, 50



@pytest.fixture
def clock() -> SettableClock:
    return SettableClock(START)


@pytest.fixture(params=["memory", "redis"])
def make(request, clock):
    """Build a State on the parametrised backend with config overrides; a fresh key prefix per test."""
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""
    states: list[State] = []

    def build(**overrides) -> State:
        config = StateConfig(redis_url=url, key_prefix=f"test:{uuid.uuid4().hex}:", **overrides)
        state = make_state(config, clock=clock)
        states.append(state)
        return state

    yield build
    for state in states:
        state.close()


# ---- factory ---------------------------------------------------------------------------------------------


def test_make_state_picks_backend_and_satisfies_interfaces(make, request):
    state = make()
    assert state.backend == request.node.callspec.params["make"]
    assert isinstance(state.cache, AnswerCache)
    assert isinstance(state.budgets, BudgetStore)
    assert isinstance(state.idempotency, IdempotencyStore)


# ---- answer cache ----------------------------------------------------------------------------------------


def test_cache_key_normalises_question_but_not_acl_or_versions():
    base = answer_cache_key("t1", "acl-a", "What is the travel policy?", "seg-1")
    assert base == answer_cache_key("t1", "acl-a", "  what IS the\ttravel   policy ?!", "seg-1")
    assert len(base) == 64 and int(base, 16) >= 0  # sha256 hex
    assert base != answer_cache_key("t1", "acl-b", "What is the travel policy?", "seg-1")
    assert base != answer_cache_key("t1", "acl-a", "What is the travel policy?", "seg-2")
    assert base != answer_cache_key("t2", "acl-a", "What is the travel policy?", "seg-1")
    assert base != answer_cache_key("t1", "acl-a", "What is the expense policy?", "seg-1")
    assert base != answer_cache_key("t1", "acl-a", "What is the travel policy?", "seg-1", "b-0123456789ab")


def test_cache_miss_then_hit_and_replace(make):
    cache = make(answer_cache_ttl_s=TTL_S).cache
    key = answer_cache_key("t1", "acl-a", "travel policy?", "seg-1")
    assert cache.get(key) is None
    cache.put(key, {"answer": "Book economy.", "citations": [1, 2]}, "t1", ["doc-a"])
    stored = {"answer": "Book economy.", "citations": [1, 2]}
    hit = cache.get(key)
    assert hit == stored
    hit["answer"] = "mutated by the caller"
    assert cache.get(key) == stored
    assert cache.get(answer_cache_key("t1", "acl-b", "travel policy?", "seg-1")) is None
    assert cache.get(answer_cache_key("t1", "acl-a", "travel policy?", "seg-2")) is None
    assert cache.get(answer_cache_key("t1", "acl-a", "  Travel   POLICY ", "seg-1")) == stored
    cache.put(key, {"answer": "Book business."}, "t1", ["doc-a"])
    assert cache.get(key) == {"answer": "Book business."}


def test_cache_rejects_values_that_are_not_json(make):
    cache = make().cache
    with pytest.raises((TypeError, ValueError)):
        cache.put("k", {"answer": object()}, "t1", [])
    assert cache.get("k") is None


def test_invalidate_documents_drops_only_that_tenants_entries_using_them(make):
    cache = make().cache
    cache.put("t1-ab", {"n": 1}, "t1", ["a", "b"])
    cache.put("t1-c", {"n": 2}, "t1", ["c"])
    cache.put("t1-bc", {"n": 3}, "t1", ["b", "c"])
    cache.put("t2-a", {"n": 4}, "t2", ["a"])
    assert cache.invalidate_documents("t1", ["a", "b"]) == 2
    assert cache.get("t1-ab") is None and cache.get("t1-bc") is None
    assert cache.get("t1-c") == {"n": 2} and cache.get("t2-a") == {"n": 4}
    assert cache.invalidate_documents("t1", ["a", "b"]) == 0
    assert cache.invalidate_documents("t1", []) == 0
    assert cache.invalidate_tenant("t1") == 1  # indexes no longer hold the dropped entries


def test_invalidate_tenant_leaves_other_tenants(make):
    cache = make().cache
    cache.put("t1-1", {"n": 1}, "t1", ["a"])
    cache.put("t1-2", {"n": 2}, "t1", [])
    cache.put("t2-1", {"n": 3}, "t2", ["a"])
    assert cache.invalidate_tenant("t1") == 2
    assert cache.get("t1-1") is None and cache.get("t1-2") is None
    assert cache.get("t2-1") == {"n": 3}
    assert cache.invalidate_documents("t1", ["a"]) == 0
    assert cache.invalidate_tenant("t1") == 0
    assert cache.invalidate_documents("t2", ["a"]) == 1


def test_cache_entries_expire_after_ttl(make, clock):
    cache = make(answer_cache_ttl_s=TTL_S).cache
    cache.put("k", {"n": 1}, "t1", ["a"])
    clock.now += TTL_S - 1
    assert cache.get("k") == {"n": 1}
    clock.now += 2
    assert cache.get("k") is None
    cache.put("k2", {"n": 2}, "t1", ["a"])
    clock.now += TTL_S + 1
    assert cache.invalidate_documents("t1", ["a"]) == 0  # expired entries are not counted as invalidated


def test_memory_cache_is_an_lru_bounded_by_max_entries(make):
    state = make(answer_cache_max_entries=2)
    if state.backend != "memory":
        pytest.skip("the entry bound applies to the in-process cache; Redis is bounded by its own maxmemory")
    cache = state.cache
    cache.put("a", {"n": 1}, "t1", ["d"])
    cache.put("b", {"n": 2}, "t1", ["d"])
    assert cache.get("a") == {"n": 1}  # touch a: b is now least recently used
    cache.put("c", {"n": 3}, "t1", ["d"])
    assert cache.get("b") is None
    assert cache.get("a") == {"n": 1} and cache.get("c") == {"n": 3}
    assert cache.invalidate_documents("t1", ["d"]) == 2  # the evicted entry left the indexes too


# ---- budgets ---------------------------------------------------------------------------------------------


def test_request_budget_is_exhausted_and_refusal_charges_nothing(make, clock):
    budgets = make(budget_requests_per_day=3).budgets
    for used in (1, 2, 3):
        decision = budgets.charge("t1", "u1")
        assert decision.allowed and decision.reason is None and decision.requests_used == used
        assert decision.retry_after_s == 0
    refused = budgets.charge("t1", "u1")
    assert not refused.allowed
    assert refused.reason == "daily request budget of 3 requests exhausted"
    assert refused.requests_used == 3
    assert refused.retry_after_s == pytest.approx(SECONDS_PER_DAY - (START % SECONDS_PER_DAY))
    assert budgets.usage("t1", "u1") == (3, 0.0)
    assert budgets.charge("t1", "u2").allowed and budgets.charge("t2", "u1").allowed  # per tenant and user


def test_cost_budget_is_exhausted_exactly_at_the_limit(make):
    budgets = make(budget_cost_per_day=1.0, cost_unit="EUR").budgets
    assert budgets.charge("t1", "u1", cost=0.4).allowed
    assert budgets.charge("t1", "u1", cost=0.4).allowed
    refused = budgets.charge("t1", "u1", cost=0.4)
    assert not refused.allowed
    assert refused.reason == "daily cost budget of 1.00 EUR exhausted"
    assert refused.cost_used == pytest.approx(0.8) and refused.requests_used == 2
    last = budgets.charge("t1", "u1", cost=0.2)  # 0.4 + 0.4 + 0.2 reaches the limit exactly, not past it
    assert last.allowed and last.cost_used == pytest.approx(1.0)
    assert not budgets.charge("t1", "u1", requests=0, cost=0.001).allowed
    requests, cost = budgets.usage("t1", "u1")
    assert requests == 3 and cost == pytest.approx(1.0)


def test_budgets_reset_on_the_next_utc_day(make, clock):
    budgets = make(budget_requests_per_day=1).budgets
    assert budgets.charge("t1", "u1").allowed
    clock.now = (START // SECONDS_PER_DAY + 1) * SECONDS_PER_DAY - 1
    refused = budgets.charge("t1", "u1")
    assert not refused.allowed and refused.retry_after_s == pytest.approx(1)
    clock.now += 1
    assert budgets.usage("t1", "u1") == (0, 0.0)
    assert budgets.charge("t1", "u1").allowed
    assert budgets.usage("t1", "u1") == (1, 0.0)


def test_budget_rejects_negative_charges(make):
    with pytest.raises(ValueError):
        make().budgets.charge("t1", "u1", requests=-1)


def test_concurrent_charges_never_exceed_the_limit(make):
    budgets = make(budget_requests_per_day=CONCURRENT_LIMIT).budgets
    allowed = []
    barrier = threading.Barrier(THREADS)

    def worker():
        barrier.wait()
        allowed.extend(budgets.charge("t1", "u1").allowed for _ in range(CHARGES_PER_THREAD))

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(allowed) == THREADS * CHARGES_PER_THREAD
    assert sum(allowed) == CONCURRENT_LIMIT
    assert budgets.usage("t1", "u1") == (CONCURRENT_LIMIT, 0.0)


# ---- idempotency -----------------------------------------------------------------------------------------


def test_idempotency_status_values_are_the_stored_strings():
    """A str enum: JSON, logs and comparisons with the old literals read exactly as before."""
    assert [s.value for s in IdempotencyStatus] == ["new", "in_progress", "done", "conflict"]
    assert IdempotencyStatus.DONE == "done" and str(IdempotencyStatus.DONE) == f"{IdempotencyStatus.DONE}" == "done"
    assert isinstance(IdempotencyStatus.NEW, str)
    assert json.dumps({"s": IdempotencyStatus.IN_PROGRESS}) == '{"s": "in_progress"}'
    assert IdempotencyStatus("conflict") is IdempotencyStatus.CONFLICT


def test_idempotency_new_in_progress_conflict_done(make):
    store = make().idempotency
    began = store.begin("admin:t1", "key-1", "fp-1")
    assert isinstance(began, IdempotencyResult) and began.status is IdempotencyStatus.NEW
    assert (began.response, began.status_code) == (None, None)
    assert store.begin("admin:t1", "key-1", "fp-1").status is IdempotencyStatus.IN_PROGRESS
    assert store.begin("admin:t1", "key-1", "fp-2").status is IdempotencyStatus.CONFLICT
    assert store.begin("admin:t2", "key-1", "fp-2").status is IdempotencyStatus.NEW  # scopes are separate
    assert store.complete("admin:t1", "key-1", {"job_id": "j-1", "items": [1]}, 202)
    done = store.begin("admin:t1", "key-1", "fp-1")
    assert (done.status, done.response, done.status_code) == (
        IdempotencyStatus.DONE, {"job_id": "j-1", "items": [1]}, 202)
    assert done.status is IdempotencyStatus.DONE
    assert store.begin("admin:t1", "key-1", "fp-2").status is IdempotencyStatus.CONFLICT


def test_idempotency_release_lets_a_retry_run(make):
    store = make().idempotency
    assert store.begin("s", "k", "fp").status == "new"
    store.release("s", "k")
    assert not store.complete("s", "k", {"late": True}, 200)  # a released key is not resurrected
    assert store.begin("s", "k", "fp-other").status == "new"
    store.release("s", "never-begun")  # harmless


def test_idempotency_keys_expire(make, clock):
    store = make(idempotency_ttl_s=TTL_S).idempotency
    assert store.begin("s", "k", "fp").status == "new"
    clock.now += TTL_S - 1
    assert store.complete("s", "k", {"ok": True}, 201)  # the stored response lives TTL from completion
    clock.now += 2
    assert store.begin("s", "k", "fp").status == "done"
    clock.now += TTL_S
    assert store.begin("s", "k", "fp-other").status == "new"
    clock.now += TTL_S + 1
    assert not store.complete("s", "k", {"ok": True}, 201)


# ---- unreachable backend ---------------------------------------------------------------------------------


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
