"""The serving-state suite (DESIGN.md §7; citadel/state/base.py): the answer cache, budgets and
idempotency behave the same in process and in Redis.

Time is a fake clock, so TTLs and UTC days are tested without sleeping.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from citadel.config import StateConfig
from citadel.state import AnswerCache, BudgetStore, IdempotencyStore, State, answer_cache_key
from citadel.state.base import SECONDS_PER_DAY, IdempotencyResult, IdempotencyStatus
from citadel.state.factory import make_state
from tests.settable_clock import SettableClock

UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"  # port 1: nothing listens, the connection is refused at once
START = 20_000 * SECONDS_PER_DAY + 3_600.0  # 01:00 UTC on some day
TTL_S = 100.0
THREADS, CHARGES_PER_THREAD, CONCURRENT_LIMIT = 20, 5, 50


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock(START)


class StateConformance:
    """Override `backend` with the Redis URL of the States under test ('' for in process) and set
    `kind` to the backend make_state picks for it; the suite's tests build States with `make`."""

    kind = "memory"  # the backend make_state picks for `backend`

    @pytest.fixture
    def backend(self) -> str:
        raise NotImplementedError("a conformance subclass provides the Redis URL ('' in process)")

    @pytest.fixture
    def make(self, backend, clock):
        """Build a State on the class's backend with config overrides; a fresh key prefix per State."""
        states: list[State] = []

        def build(**overrides) -> State:
            config = StateConfig(redis_url=backend, key_prefix=f"test:{uuid.uuid4().hex}:", **overrides)
            state = make_state(config, clock=clock)
            states.append(state)
            return state

        yield build
        for state in states:
            state.close()

    def test_make_state_picks_backend_and_satisfies_interfaces(self, make):
        state = make()
        assert state.backend == self.kind
        assert isinstance(state.cache, AnswerCache)
        assert isinstance(state.budgets, BudgetStore)
        assert isinstance(state.idempotency, IdempotencyStore)

    def test_cache_miss_then_hit_and_replace(self, make):
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

    def test_cache_rejects_values_that_are_not_json(self, make):
        cache = make().cache
        with pytest.raises((TypeError, ValueError)):
            cache.put("k", {"answer": object()}, "t1", [])
        assert cache.get("k") is None

    def test_invalidate_documents_drops_only_that_tenants_entries_using_them(self, make):
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

    def test_invalidate_tenant_leaves_other_tenants(self, make):
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

    def test_cache_entries_expire_after_ttl(self, make, clock):
        cache = make(answer_cache_ttl_s=TTL_S).cache
        cache.put("k", {"n": 1}, "t1", ["a"])
        clock.now += TTL_S - 1
        assert cache.get("k") == {"n": 1}
        clock.now += 2
        assert cache.get("k") is None
        cache.put("k2", {"n": 2}, "t1", ["a"])
        clock.now += TTL_S + 1
        assert cache.invalidate_documents("t1", ["a"]) == 0  # expired entries are not counted as invalidated

    def test_memory_cache_is_an_lru_bounded_by_max_entries(self, make):
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

    def test_request_budget_is_exhausted_and_refusal_charges_nothing(self, make, clock):
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

    def test_cost_budget_is_exhausted_exactly_at_the_limit(self, make):
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

    def test_budgets_reset_on_the_next_utc_day(self, make, clock):
        budgets = make(budget_requests_per_day=1).budgets
        assert budgets.charge("t1", "u1").allowed
        clock.now = (START // SECONDS_PER_DAY + 1) * SECONDS_PER_DAY - 1
        refused = budgets.charge("t1", "u1")
        assert not refused.allowed and refused.retry_after_s == pytest.approx(1)
        clock.now += 1
        assert budgets.usage("t1", "u1") == (0, 0.0)
        assert budgets.charge("t1", "u1").allowed
        assert budgets.usage("t1", "u1") == (1, 0.0)

    def test_budget_rejects_negative_charges(self, make):
        with pytest.raises(ValueError):
            make().budgets.charge("t1", "u1", requests=-1)

    def test_concurrent_charges_never_exceed_the_limit(self, make):
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

    def test_idempotency_new_in_progress_conflict_done(self, make):
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

    def test_idempotency_release_lets_a_retry_run(self, make):
        store = make().idempotency
        assert store.begin("s", "k", "fp").status == "new"
        store.release("s", "k")
        assert not store.complete("s", "k", {"late": True}, 200)  # a released key is not resurrected
        assert store.begin("s", "k", "fp-other").status == "new"
        store.release("s", "never-begun")  # harmless

    def test_idempotency_keys_expire(self, make, clock):
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
