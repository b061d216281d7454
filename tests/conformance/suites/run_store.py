"""The RunStore suite (DESIGN.md §7, §10; citadel/state/runs.py): in process, SQLite and Redis Streams
behave the same.

`peer` is a second store on the same data (another connection to the SQLite file, another client on the
same Redis prefix; the same object in process), which is what a second process or replica sees. Time
is a fake clock, so leases expire without sleeping; only `wait` uses real time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from citadel.config import CitadelConfig, StateConfig
from citadel.state.base import StateUnavailable
from citadel.state.factory import make_run_store
from citadel.state.runs import MAX_EVENTS_PER_READ, EventType, Run, RunStatus, RunStore
from tests.conformance.suites.store_pair import StorePairFixtures
from tests.settable_clock import SettableClock

REPO = Path(__file__).resolve().parents[3]
UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"  # port 1: nothing listens, the connection is refused at once
START = 1_800_000_000.0
TTL_S = 30.0
THREADS, APPENDS_PER_THREAD = 8, 25
# `wait` must return well before its timeout once an event arrives (it polls at ≤ 50 ms).
PROMPT_S = 2.0
# …and within this of the append itself (SQLite polls every 25 ms; Redis and memory are woken).
AFTER_APPEND_S = 0.3
WAIT_TIMEOUT_S = 10.0
SHORT_WAIT_S = 0.3


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock(START)


class Backend:
    """Opens stores of one backend on one shared place (file or key prefix), and closes them after."""

    def __init__(self, kind: str, clock: SettableClock, tmp_path: Path, redis_url: str):
        self.kind, self.clock, self.redis_url = kind, clock, redis_url
        self.path = tmp_path / "runs.sqlite"
        self.prefix = f"test:{uuid.uuid4().hex}:"
        self.opened: list = []
        self.first = None

    def config(self) -> CitadelConfig:
        return CitadelConfig(home=self.path.parent, state=StateConfig(redis_url=self.redis_url,
                                                                      key_prefix=self.prefix))

    def open(self) -> RunStore:
        if self.kind == "memory" and self.first is not None:
            return self.first  # one process: the peer is the same store
        store = make_run_store(self.config(), clock=self.clock, backend="memory" if self.kind == "memory" else None)
        self.opened.append(store)
        self.first = self.first or store
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()


def new_run(run_id: str = "r1", **fields) -> Run:
    values = dict(tenant_id="t1", user_id="u1", conversation_id="c1", question="Is Acme eligible?",
                  groups=("sales", "emea"))
    values.update(fields)
    return Run(run_id, **values)


def seqs(events) -> list[int]:
    return [e.seq for e in events]


_APPEND_CHILD = """
import sys
from citadel.state.runs import EventType
from citadel.state.runs_sqlite import SQLiteRunStore
store = SQLiteRunStore(sys.argv[1], lambda: 0.0)
print(",".join(str(store.append("r1", EventType.TOKEN, {"p": sys.argv[2], "i": i}).seq) for i in range(int(sys.argv[3]))))
store.close()
"""


def _recorded_run(store, run_id: str, **fields) -> None:
    store.create(new_run(run_id, **fields))
    store.append(run_id, EventType.PROGRESS, {"stage": "route"})
    store.record_step(run_id, "step:1", {"status": "done"})
    store.acquire(run_id, "replica-a", TTL_S)
    store.request_cancel(run_id)


def _gone(store, run_id: str) -> bool:
    return (store.get(run_id) is None and store.events(run_id) == [] and store.steps(run_id) == {}
            and not store.cancel_requested(run_id))


class RunStoreConformance(StorePairFixtures):
    """The RunStore contract; the fixtures (`backend`, `store`, `peer`): StorePairFixtures."""

    def test_factory_picks_the_backend_and_satisfies_the_protocol(self, backend, store):
        expected = {"memory": "MemoryRunStore", "sqlite": "SQLiteRunStore", "redis": "RedisRunStore"}[backend.kind]
        assert type(store).__name__ == expected
        assert isinstance(store, RunStore)
        if backend.kind == "sqlite":
            assert backend.path.exists()  # at config.runs_path

    def test_create_and_get_round_trip_with_times_from_the_clock(self, store, peer, clock):
        created = store.create(new_run(path="ignored-until-routed"))
        assert created.created_at == created.updated_at == START
        for reader in (store, peer):
            got = reader.get("r1")
            assert got == created
            assert got.groups == ("sales", "emea") and type(got.groups) is tuple
            assert got.status is RunStatus.QUEUED and got.path == "ignored-until-routed" and got.stop_reason is None
        assert store.get("nope") is None
        with pytest.raises(ValueError):
            peer.create(new_run())
        assert store.get("r1") == created  # the refused create changed nothing

    def test_update_sets_only_the_given_fields(self, store, peer, clock):
        store.create(new_run())
        clock.now += 5
        running = store.update("r1", status=RunStatus.RUNNING, path="agentic")
        assert (running.status, running.path, running.stop_reason) == (RunStatus.RUNNING, "agentic", None)
        assert running.created_at == START and running.updated_at == START + 5
        clock.now += 5
        stopped = peer.update("r1", status=RunStatus.STOPPED, stop_reason="step_cap")
        assert (stopped.status, stopped.path, stopped.stop_reason) == (RunStatus.STOPPED, "agentic", "step_cap")
        assert stopped.updated_at == START + 10
        touched = store.update("r1")
        assert (touched.status, touched.path, touched.stop_reason) == (RunStatus.STOPPED, "agentic", "step_cap")
        assert store.get("r1") == touched and peer.get("r1") == touched
        blank = store.update("r1", path="")  # an empty string is a value, not "leave it"
        assert blank.path == "" and store.get("r1").path == ""

    def test_unknown_runs_raise_on_writes_and_read_as_empty(self, store):
        with pytest.raises(KeyError):
            store.update("ghost", status=RunStatus.RUNNING)
        with pytest.raises(KeyError):
            store.append("ghost", EventType.PROGRESS, {"n": 1})
        with pytest.raises(KeyError):
            store.record_step("ghost", "s1", {"ok": True})
        assert store.get("ghost") is None
        assert store.events("ghost") == [] and store.steps("ghost") == {}
        assert store.wait("ghost", 0, 0.05) == []
        assert store.cancel_requested("ghost") is False
        assert store.orphans() == []  # the failed writes created no run

    def test_run_ids_with_separators_do_not_collide(self, store):
        for run_id in ("a", "a:events", "a%3Aevents", "a:steps"):
            store.create(new_run(run_id))
        store.append("a", EventType.TOKEN, {"t": "x"})
        store.record_step("a", "s", {"n": 1})
        for other in ("a:events", "a%3Aevents", "a:steps"):
            assert store.events(other) == [] and store.steps(other) == {}
        assert seqs(store.events("a")) == [1]

    def test_enum_values_round_trip_as_the_same_strings(self, store, peer):
        store.create(new_run())
        for kind in EventType:
            store.append("r1", kind, {"kind": kind.value})
        store.append("r1", "token", {"plain": "str"})  # a plain string of a member is accepted too
        events = peer.events("r1")
        assert [e.type for e in events] == [*EventType, EventType.TOKEN]
        for event in events:
            assert type(event.type) is EventType and str(event.type) == event.type.value
            assert json.loads(json.dumps(event.to_dict()))["type"] == event.type.value
        for status in RunStatus:
            store.update("r1", status=status)
            got = peer.get("r1")
            assert got.status == status.value and type(got.status) is RunStatus
            assert json.loads(json.dumps(got.to_dict()))["status"] == status.value

    def test_append_numbers_events_and_after_seq_returns_every_later_one_once(self, store, peer, clock):
        store.create(new_run())
        kinds = [EventType.PROGRESS, EventType.TOKEN, EventType.CITATION, EventType.TOKEN, EventType.FINAL]
        appended = []
        for n, kind in enumerate(kinds, start=1):
            clock.now = START + n
            appended.append(store.append("r1", kind, {"n": n, "nested": {"list": [n, "x"]}}))
        assert seqs(appended) == [1, 2, 3, 4, 5]
        assert [e.at for e in appended] == [START + n for n in range(1, 6)]
        for after in range(0, 6):
            later = peer.events("r1", after_seq=after)
            assert later == appended[after:]
        assert peer.events("r1", after_seq=-3) == appended
        assert peer.events("r1", after_seq=99) == []
        assert appended[3].to_dict() == {"seq": 4, "type": "token", "data": {"n": 4, "nested": {"list": [4, "x"]}}}

    def test_events_page_with_a_limit(self, store):
        store.create(new_run())
        for n in range(7):
            store.append("r1", EventType.TOKEN, {"n": n})
        pages, after = [], 0
        while page := store.events("r1", after_seq=after, limit=3):
            assert len(page) <= 3
            pages.append(seqs(page))
            after = page[-1].seq
        assert pages == [[1, 2, 3], [4, 5, 6], [7]]
        assert store.events("r1", limit=0) == []
        assert len(store.events("r1", limit=MAX_EVENTS_PER_READ)) == 7

    def test_concurrent_appends_from_threads_and_two_stores_are_gapless(self, backend, store, peer):
        """Half the threads append through a second store (another connection or client): seq stays 1..n."""
        store.create(new_run())
        barrier = threading.Barrier(THREADS)
        mine: dict[int, list[int]] = {}
        errors: list[BaseException] = []

        def append_many(worker: int) -> None:
            target = store if worker % 2 else peer
            try:
                barrier.wait()
                mine[worker] = [target.append("r1", EventType.TOKEN, {"w": worker, "i": i}).seq
                                for i in range(APPENDS_PER_THREAD)]
            except BaseException as error:  # noqa: BLE001 (reported below, in the test's thread)
                errors.append(error)

        threads = [threading.Thread(target=append_many, args=(w,)) for w in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors
        total = THREADS * APPENDS_PER_THREAD
        returned = sorted(seq for seqs_ in mine.values() for seq in seqs_)
        assert returned == list(range(1, total + 1))
        events = store.events("r1")
        assert seqs(events) == list(range(1, total + 1))
        for worker, numbers in mine.items():  # each worker's events carry its own data, in its order
            assert numbers == sorted(numbers)
            assert [events[s - 1].data for s in numbers] == [{"w": worker, "i": i} for i in range(APPENDS_PER_THREAD)]

    def test_sqlite_appends_from_two_processes_are_gapless(self, backend, store):
        if backend.kind != "sqlite":
            pytest.skip("two processes share a SQLite file; Redis is covered by the two-client test")
        store.create(new_run())
        count = 60
        children = [subprocess.Popen([sys.executable, "-c", _APPEND_CHILD, str(backend.path), name, str(count)],
                                     cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for name in ("p1", "p2")]
        outputs = [child.communicate(timeout=120) for child in children]
        assert all(child.returncode == 0 for child in children), [err for _, err in outputs]
        returned = sorted(int(seq) for out, _ in outputs for seq in out.strip().split(","))
        assert returned == list(range(1, 2 * count + 1))
        assert seqs(store.events("r1", limit=MAX_EVENTS_PER_READ)) == list(range(1, 2 * count + 1))

    def test_wait_returns_promptly_when_another_store_appends(self, store, peer):
        store.create(new_run())
        store.append("r1", EventType.PROGRESS, {"n": 1})
        started = time.monotonic()
        assert seqs(store.wait("r1", after_seq=0, timeout_s=WAIT_TIMEOUT_S)) == [1]  # already there: no wait
        assert time.monotonic() - started < PROMPT_S

        appended_at: list[float] = []

        def append_later() -> None:
            time.sleep(0.1)
            peer.append("r1", EventType.TOKEN, {"n": 2})
            appended_at.append(time.monotonic())

        writer = threading.Thread(target=append_later)
        started = time.monotonic()
        writer.start()
        arrived = store.wait("r1", after_seq=1, timeout_s=WAIT_TIMEOUT_S)
        returned_at = time.monotonic()
        writer.join()
        assert seqs(arrived) == [2] and arrived[0].data == {"n": 2}
        assert 0.05 < returned_at - started < PROMPT_S
        assert returned_at - appended_at[0] < AFTER_APPEND_S  # woken by the event, not by a long poll

    def test_wait_returns_nothing_after_the_timeout(self, store):
        store.create(new_run())
        store.append("r1", EventType.PROGRESS, {"n": 1})
        started = time.monotonic()
        assert store.wait("r1", after_seq=1, timeout_s=SHORT_WAIT_S) == []
        elapsed = time.monotonic() - started
        assert SHORT_WAIT_S * 0.8 <= elapsed < SHORT_WAIT_S + PROMPT_S
        started = time.monotonic()
        assert store.wait("r1", after_seq=1, timeout_s=0) == []
        assert store.wait("r1", after_seq=1, timeout_s=-5) == []
        assert time.monotonic() - started < PROMPT_S

    def test_record_step_first_write_wins(self, store, peer):
        store.create(new_run())
        first = {"passages": ["c1", "c2"], "tokens": 120}
        assert store.record_step("r1", "s1", first) == first
        assert peer.record_step("r1", "s1", {"passages": [], "tokens": 0}) == first
        assert store.record_step("r1", "s2", {"ok": True}) == {"ok": True}
        assert store.steps("r1") == peer.steps("r1") == {"s1": first, "s2": {"ok": True}}
        assert list(store.steps("r1")) == ["s1", "s2"]

    def test_concurrent_records_of_one_step_all_see_the_same_winner(self, store, peer):
        store.create(new_run())
        barrier = threading.Barrier(THREADS)
        seen: list[dict] = []

        def record(worker: int) -> None:
            barrier.wait()
            seen.append((store if worker % 2 else peer).record_step("r1", "s1", {"by": worker}))

        threads = [threading.Thread(target=record, args=(w,)) for w in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(seen) == THREADS
        assert all(result == seen[0] for result in seen)
        assert store.steps("r1") == {"s1": seen[0]}

    def test_lease_is_exclusive_until_it_expires(self, store, peer, clock):
        store.create(new_run())
        assert store.acquire("r1", "replica-a", TTL_S)
        assert not peer.acquire("r1", "replica-b", TTL_S)
        assert peer.acquire("r1", "replica-a", TTL_S)  # already the owner's: taken again
        clock.now += TTL_S - 1
        assert not peer.acquire("r1", "replica-b", TTL_S)  # still live
        clock.now += 1
        assert peer.acquire("r1", "replica-b", TTL_S)  # expired exactly now: free
        assert not store.acquire("r1", "replica-a", TTL_S)

    def test_renew_extends_only_the_owners_lease(self, store, peer, clock):
        store.create(new_run())
        assert not store.renew("r1", "replica-a", TTL_S)  # nothing to renew
        assert store.acquire("r1", "replica-a", TTL_S)
        assert not peer.renew("r1", "replica-b", TTL_S)
        clock.now += TTL_S - 1
        assert peer.renew("r1", "replica-a", TTL_S)
        clock.now += TTL_S - 1  # past the first expiry, within the renewed one
        assert not store.acquire("r1", "replica-b", TTL_S)
        clock.now += 2
        assert store.acquire("r1", "replica-b", TTL_S)
        assert not peer.renew("r1", "replica-a", TTL_S)  # taken over: the old owner must stop

    def test_release_only_by_the_owner(self, store, peer):
        store.create(new_run())
        assert store.acquire("r1", "replica-a", TTL_S)
        peer.release("r1", "replica-b")
        assert not peer.acquire("r1", "replica-b", TTL_S)  # a stranger's release did nothing
        store.release("r1", "replica-a")
        assert peer.acquire("r1", "replica-b", TTL_S)
        assert not store.renew("r1", "replica-a", TTL_S)
        store.release("r1", "nobody")  # releasing a lease one does not hold is harmless

    def test_orphans_are_unfinished_runs_with_an_expired_or_no_lease(self, store, peer, clock):
        for run_id in ("no-lease", "live", "expired", "done", "stopped-expired", "running-no-lease"):
            store.create(new_run(run_id))
        assert store.acquire("live", "a", TTL_S * 2)
        assert store.acquire("expired", "a", TTL_S)
        assert store.acquire("stopped-expired", "a", TTL_S)
        store.update("done", status=RunStatus.SUCCEEDED)
        store.update("stopped-expired", status=RunStatus.STOPPED)
        store.update("running-no-lease", status=RunStatus.RUNNING)
        assert peer.orphans() == ["no-lease", "running-no-lease"]
        clock.now += TTL_S
        assert peer.orphans() == ["no-lease", "expired", "running-no-lease"]
        clock.now += TTL_S
        assert peer.orphans() == ["no-lease", "live", "expired", "running-no-lease"]
        assert peer.orphans(limit=2) == ["no-lease", "live"]
        assert peer.orphans(limit=0) == []
        assert peer.acquire("expired", "b", TTL_S)  # adopted
        store.update("no-lease", status=RunStatus.CANCELLED)
        store.update("running-no-lease", status=RunStatus.FAILED)
        assert store.orphans() == ["live"]
        store.update("done", status=RunStatus.RUNNING)  # back to unfinished: listed again, in creation order
        assert store.orphans() == ["live", "done"]

    def test_cancel_flag(self, store, peer):
        store.create(new_run("r1"))
        store.create(new_run("r2"))
        assert not store.cancel_requested("r1")
        peer.request_cancel("r1")
        peer.request_cancel("r1")  # asking twice is the same as once
        assert store.cancel_requested("r1") and peer.cancel_requested("r1")
        assert not store.cancel_requested("r2")

    def test_durable_backends_refuse_unstorable_records_without_using_a_seq(self, backend, store):
        if backend.kind == "memory":
            pytest.skip("the in-process store keeps Python objects as they are")
        store.create(new_run())
        with pytest.raises((TypeError, ValueError)):
            store.append("r1", EventType.TOKEN, {"x": object()})
        with pytest.raises(ValueError):
            store.append("r1", EventType.TOKEN, {"x": float("nan")})
        with pytest.raises(ValueError):
            store.record_step("r1", "s1", {"x": "y" * 1_000_001})
        with pytest.raises(ValueError):
            store.acquire("r1", "a", float("nan"))
        with pytest.raises(ValueError):
            store.renew("r1", "a", -1.0)
        assert store.append("r1", EventType.TOKEN, {"x": 1}).seq == 1  # nothing above consumed a seq
        assert store.steps("r1") == {}

    def test_redis_retried_create_and_append_take_effect_once(self, backend, store):
        """redis_client.connect retries a command whose connection failed; a retry may follow one that ran."""
        if backend.kind != "redis":
            pytest.skip("only the Redis client retries commands")
        key, stream = store._key("r1"), store._key("r1", ":events")
        create_args = ["r1", "0", "call-1", "1.0", "run_id", "r1", "tenant_id", "t1", "user_id", "u1", "conversation_id",
                       "c1", "question", "q", "groups", "[]", "status", "queued", "created_at", "1.0", "updated_at", "1.0"]
        create_keys = [key, store._unfinished, store._created, store._by_created, store._owner_key("t1", "u1")]
        created = [store._create(keys=create_keys, args=create_args) for _ in range(2)]
        assert created == [1, 1]
        with pytest.raises(ValueError):
            store.create(new_run())  # another call, another token: refused
        replies = [store._append(keys=[key, stream], args=["token", "{}", "1.0", "call-2"]) for _ in range(2)]
        assert replies == [1, 1]
        assert store.append("r1", EventType.FINAL, {}).seq == 2
        assert seqs(store.events("r1")) == [1, 2]
        assert store.orphans() == ["r1"]

    def test_unreachable_backends_raise_state_unavailable_without_the_driver_message(self, backend, tmp_path, clock):
        if backend.kind == "memory":
            pytest.skip("the in-process store cannot be unreachable")
        if backend.kind == "sqlite":
            blocked = tmp_path / "blocked"
            (blocked / "runs.sqlite").mkdir(parents=True)  # a directory where the file should be
            with pytest.raises(StateUnavailable) as raised:
                make_run_store(CitadelConfig(home=blocked), clock=clock)
            assert "unable to open" not in str(raised.value)
            return
        config = CitadelConfig(home=tmp_path, state=StateConfig(redis_url=UNREACHABLE_REDIS))
        store = make_run_store(config, clock=clock)
        try:
            for call in (lambda: store.get("r1"), lambda: store.create(new_run()),
                         lambda: store.append("r1", EventType.TOKEN, {}), lambda: store.wait("r1", 0, 0.2),
                         lambda: store.acquire("r1", "a", TTL_S), lambda: store.orphans()):
                with pytest.raises(StateUnavailable):
                    call()
        finally:
            store.close()

    def test_delete_user_removes_only_that_users_runs_with_everything_recorded(self, store, peer):
        _recorded_run(store, "mine-1")
        _recorded_run(store, "mine-2", status=RunStatus.SUCCEEDED)
        _recorded_run(store, "other-user", user_id="u2")
        _recorded_run(store, "other-tenant", tenant_id="t2")
        assert peer.delete_user("t1", "u1") == 2
        assert _gone(store, "mine-1") and _gone(store, "mine-2")
        assert store.acquire("mine-1", "replica-b", TTL_S), "its lease went too"
        for kept in ("other-user", "other-tenant"):
            assert store.get(kept) is not None and store.events(kept) and store.steps(kept)
        assert "mine-1" not in store.orphans() and store.delete_user("t1", "u1") == 0

    def test_purge_idle_removes_runs_with_no_change_or_event_within_the_window(self, store, clock):
        _recorded_run(store, "idle")
        _recorded_run(store, "updated")
        _recorded_run(store, "appended")
        clock.now = START + 100.0
        store.update("updated", status=RunStatus.SUCCEEDED)
        store.append("appended", EventType.PROGRESS, {"stage": "retrieve"})
        clock.now = START + 150.0
        assert store.purge_idle(100.0) == 1
        assert _gone(store, "idle")
        assert store.get("updated") is not None and store.get("appended") is not None
        clock.now = START + 1_000.0
        assert store.purge_idle(100.0) == 2 and store.purge_idle(100.0) == 0
