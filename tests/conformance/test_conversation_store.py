"""Every ConversationStore runs the conversation-store suite (tests/conformance/suites/conversation_store.py):
in process and SQLite; the tests that are not about a backend follow.
"""

from __future__ import annotations

import pytest

from citadel.config import CitadelConfig
from citadel.state.conversations import ASSISTANT, MemoryConversationStore, Message
from citadel.state.factory import make_conversation_store, make_run_store
from citadel.state.runs import EventType, Run
from tests.conformance.suites.conversation_store import (ConversationStoreConformance, Backend, clock,
                                                         conversation)  # noqa: F401 (clock: fixtures)


class TestMemoryConversationStore(ConversationStoreConformance):
    @pytest.fixture
    def backend(self, clock, tmp_path):
        opened = Backend("memory", clock, tmp_path / "home")
        yield opened
        opened.close()


class TestSQLiteConversationStore(ConversationStoreConformance):
    @pytest.fixture
    def backend(self, clock, tmp_path):
        opened = Backend("sqlite", clock, tmp_path / "home")
        yield opened
        opened.close()


def test_factory_refuses_unknown_backends(tmp_path):
    with pytest.raises(ValueError):
        make_conversation_store(CitadelConfig(home=tmp_path), backend="redis")
    assert isinstance(make_conversation_store(CitadelConfig(home=tmp_path), backend="memory"),
                      MemoryConversationStore)


def test_sqlite_conversations_share_the_runs_file(tmp_path, clock):
    config = CitadelConfig(home=tmp_path)
    runs = make_run_store(config, clock=clock)
    conversations = make_conversation_store(config, clock=clock)
    try:
        conversations.create(conversation())
        runs.create(Run("r1", "t1", "u1", "c1", "q"))
        runs.append("r1", EventType.FINAL, {"answer": "yes"})
        conversations.add_message(Message("c1", ASSISTANT, "yes", run_id="r1"))
        assert [e.seq for e in runs.events("r1")] == [1]
        assert [m.run_id for m in conversations.messages("c1")] == ["r1"]
    finally:
        runs.close()
        conversations.close()
