"""The ConversationStore suite (DESIGN.md §10; citadel/state/conversations.py): in process and SQLite
behave the same.

`peer` is a second store on the same file (what another process sees; the same object in process).
The SQLite store shares its file with the SQLite run store (`CitadelConfig.runs_path`). Time is a fake
clock.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from citadel.config import CitadelConfig
from citadel.state.base import StateUnavailable
from citadel.state.conversations import (ASSISTANT, FROM_USER, USER, Conversation, ConversationStore, Memory, Message,
                                         SourceRef, SummaryLine)
from citadel.state.factory import make_conversation_store
from tests.conformance.suites.store_pair import StorePairFixtures
from tests.settable_clock import SettableClock

START = 1_800_000_000.0
THREADS, MESSAGES_PER_THREAD = 6, 15


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock(START)


class Backend:
    def __init__(self, kind: str, clock: SettableClock, home: Path):
        self.kind, self.clock, self.home = kind, clock, home
        self.opened: list = []

    def config(self) -> CitadelConfig:
        return CitadelConfig(home=self.home)

    def open(self) -> ConversationStore:
        if self.kind == "memory" and self.opened:
            return self.opened[0]  # one process: the peer is the same store
        store = make_conversation_store(self.config(), clock=self.clock,
                                        backend="memory" if self.kind == "memory" else None)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()


def conversation(conversation_id: str = "c1", tenant_id: str = "t1", user_id: str = "u1") -> Conversation:
    return Conversation(conversation_id, tenant_id, user_id)


def memory(memory_id: str, conversation_id: str = "c1", tenant_id: str = "t1", user_id: str = "u1",
           text: str = "I manage the EMEA team") -> Memory:
    return Memory(memory_id, tenant_id, user_id, text, conversation_id)


def _session(store, conversation_id: str, tenant_id: str = "t1", user_id: str = "u1") -> None:
    store.create(conversation(conversation_id, tenant_id, user_id))
    store.add_message(Message(conversation_id, USER, "hello"))
    store.set_summary(conversation_id, [SummaryLine("a line", None)], 1)
    store.remember(memory(f"m-{conversation_id}", conversation_id, tenant_id, user_id))


def _gone(store, conversation_id: str) -> bool:
    return (store.get(conversation_id) is None and store.messages(conversation_id) == []
            and store.summary(conversation_id) == ([], 0))


class ConversationStoreConformance(StorePairFixtures):
    """The ConversationStore contract; the fixtures (`backend`, `store`, `peer`): StorePairFixtures."""

    def test_factory_picks_the_backend_and_satisfies_the_protocol(self, backend, store):
        expected = {"memory": "MemoryConversationStore", "sqlite": "SQLiteConversationStore"}[backend.kind]
        assert type(store).__name__ == expected
        assert isinstance(store, ConversationStore)
        if backend.kind == "sqlite":
            assert backend.config().runs_path.exists()

    def test_create_and_get(self, store, peer):
        created = store.create(conversation())
        assert created == Conversation("c1", "t1", "u1", created_at=START)
        assert peer.get("c1") == created
        assert store.get("nope") is None
        with pytest.raises(ValueError):
            peer.create(conversation(user_id="someone-else"))
        assert store.get("c1") == created

    def test_messages_are_numbered_in_order_with_their_sources(self, store, peer, clock):
        store.create(conversation())
        store.create(conversation("c2"))
        sources = (SourceRef("policy-2026", 3), SourceRef("acme-msa", 1))
        first = store.add_message(Message("c1", USER, "Is Acme eligible?"))
        clock.now += 1
        second = peer.add_message(Message("c1", ASSISTANT, "Yes [1][2].", run_id="r1", sources=sources, seq=99, at=7.0))
        other = store.add_message(Message("c2", USER, "Hello"))
        assert (first.seq, second.seq, other.seq) == (1, 2, 1)  # per conversation; the caller's seq/at ignored
        assert (first.at, second.at) == (START, START + 1)
        for reader in (store, peer):
            got = reader.messages("c1")
            assert got == [first, second]
            assert got[1].sources == sources and type(got[1].sources) is tuple
            assert got[0].run_id is None and got[1].run_id == "r1"
        assert store.messages("nope") == []
        with pytest.raises(KeyError):
            store.add_message(Message("nope", USER, "hi"))

    def test_concurrent_messages_from_two_stores_are_gapless(self, store, peer):
        store.create(conversation())
        barrier = threading.Barrier(THREADS)
        errors: list[BaseException] = []

        def add_many(worker: int) -> None:
            target = store if worker % 2 else peer
            try:
                barrier.wait()
                for i in range(MESSAGES_PER_THREAD):
                    target.add_message(Message("c1", USER, f"{worker}:{i}"))
            except BaseException as error:  # noqa: BLE001 (reported below)
                errors.append(error)

        threads = [threading.Thread(target=add_many, args=(w,)) for w in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors
        got = store.messages("c1")
        assert [m.seq for m in got] == list(range(1, THREADS * MESSAGES_PER_THREAD + 1))
        assert sorted(m.content for m in got) == sorted(f"{w}:{i}" for w in range(THREADS)
                                                        for i in range(MESSAGES_PER_THREAD))

    def test_summary_is_replaced_whole(self, store, peer):
        store.create(conversation())
        assert store.summary("c1") == ([], 0)
        lines = [SummaryLine("2026 policy: up to 12%", SourceRef("policy-2026", 3)),
                 SummaryLine("The user manages EMEA", None)]
        store.set_summary("c1", lines, through_seq=4)
        got, through = peer.summary("c1")
        assert (got, through) == (lines, 4)
        assert got[0].source == SourceRef("policy-2026", 3) and got[1].source is None
        replacement = [SummaryLine("Acme renews in March", SourceRef("acme-msa", 2))]
        peer.set_summary("c1", replacement, through_seq=9)
        assert store.summary("c1") == (replacement, 9)
        store.set_summary("c1", [], through_seq=9)
        assert store.summary("c1") == ([], 9)
        assert store.summary("nope") == ([], 0)
        with pytest.raises(KeyError):
            store.set_summary("nope", lines, through_seq=1)

    def test_memories_are_scoped_to_tenant_and_user(self, store, peer, clock):
        store.create(conversation("c1"))
        store.create(conversation("c2", user_id="u2"))
        store.create(conversation("c3", tenant_id="t2"))
        first = store.remember(memory("m1"))
        clock.now += 1
        second = peer.remember(memory("m2", text="Prefer short answers"))
        store.remember(memory("m3", conversation_id="c2", user_id="u2", text="u2's own"))
        store.remember(memory("m4", conversation_id="c3", tenant_id="t2", text="same user id, other tenant"))
        assert (first.at, second.at, first.origin) == (START, START + 1, FROM_USER)
        assert peer.memories("t1", "u1") == [first, second]
        assert [m.memory_id for m in store.memories("t1", "u2")] == ["m3"]
        assert [m.memory_id for m in store.memories("t2", "u1")] == ["m4"]
        assert store.memories("t2", "u2") == []
        with pytest.raises(KeyError):
            store.remember(memory("m5", conversation_id="nope"))
        assert [m.memory_id for m in store.memories("t1", "u1")] == ["m1", "m2"]

    def test_remembering_an_id_again_replaces_it_in_place(self, store, peer, clock):
        store.create(conversation())
        store.remember(memory("m1", text="old"))
        store.remember(memory("m2"))
        clock.now += 5
        replaced = peer.remember(memory("m1", text="new"))
        assert replaced.at == START + 5
        assert [(m.memory_id, m.text) for m in store.memories("t1", "u1")] == [("m1", "new"), ("m2", "I manage the EMEA team")]

    def test_delete_cascades_to_everything_derived_from_the_conversation(self, store, peer):
        store.create(conversation("c1"))
        store.create(conversation("c2"))
        store.add_message(Message("c1", USER, "I manage the EMEA team; remember that"))
        store.add_message(Message("c2", USER, "kept"))
        store.set_summary("c1", [SummaryLine("EMEA manager", None)], through_seq=1)
        store.set_summary("c2", [SummaryLine("kept", None)], through_seq=1)
        store.remember(memory("from-c1"))
        kept = store.remember(memory("from-c2", conversation_id="c2", text="kept"))
        assert peer.delete("c1") is True
        for reader in (store, peer):
            assert reader.get("c1") is None
            assert reader.messages("c1") == []
            assert reader.summary("c1") == ([], 0)
            assert reader.memories("t1", "u1") == [kept]
            assert [m.content for m in reader.messages("c2")] == ["kept"]
            assert reader.summary("c2")[1] == 1
        assert store.delete("c1") is False
        store.create(conversation("c1"))  # the id can be used again, and starts empty
        assert store.add_message(Message("c1", USER, "fresh")).seq == 1
        assert store.summary("c1") == ([], 0)

    def test_sqlite_errors_raise_state_unavailable_without_the_driver_message(self, backend, tmp_path, clock):
        if backend.kind == "memory":
            pytest.skip("the in-process store has no file to lose")
        blocked = tmp_path / "blocked"
        (blocked / "runs.sqlite").mkdir(parents=True)  # a directory where the file should be
        with pytest.raises(StateUnavailable) as raised:
            make_conversation_store(CitadelConfig(home=blocked), clock=clock)
        assert "unable to open" not in str(raised.value)

    def test_sqlite_refuses_oversized_text(self, backend, store):
        if backend.kind == "memory":
            pytest.skip("the in-process store keeps what it is given")
        store.create(conversation())
        with pytest.raises(ValueError):
            store.add_message(Message("c1", USER, "x" * 1_000_001))
        with pytest.raises(ValueError):
            store.remember(memory("m1", text="x" * 1_000_001))
        assert store.messages("c1") == [] and store.memories("t1", "u1") == []

    def test_delete_user_removes_only_that_users_conversations_and_memories(self, store, peer):
        _session(store, "mine-1")
        _session(store, "mine-2")
        _session(store, "other-user", user_id="u2")
        _session(store, "other-tenant", tenant_id="t2")
        assert peer.delete_user("t1", "u1") == 2
        assert _gone(store, "mine-1") and _gone(store, "mine-2") and store.memories("t1", "u1") == []
        assert store.get("other-user") is not None and store.memories("t1", "u2")
        assert store.get("other-tenant") is not None and store.memories("t2", "u1")
        assert store.delete_user("t1", "u1") == 0

    def test_purge_idle_removes_conversations_with_no_message_or_memory_within_the_window(self, store, clock):
        _session(store, "idle")
        _session(store, "spoken")
        _session(store, "remembered")
        clock.now = START + 100.0
        store.add_message(Message("spoken", USER, "still here"))
        store.remember(memory("m-late", "remembered"))
        clock.now = START + 150.0
        assert store.purge_idle(100.0) == 1
        assert _gone(store, "idle") and "m-idle" not in {m.memory_id for m in store.memories("t1", "u1")}
        assert store.get("spoken") is not None and store.get("remembered") is not None
        clock.now = START + 1_000.0
        assert store.purge_idle(100.0) == 2 and store.memories("t1", "u1") == []
