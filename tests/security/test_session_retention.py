"""Sessions expire.

Before: conversations, their summaries and memories, and runs with their event logs were kept
forever; only the answer log had a retention. Now `agent.retention_days` bounds them too, enforced by
the answer log's purge (one purge: `citadel purge-logs`, and the serving processes' purge thread).
A session expires when nothing happened in it for the retention (its last message, memory, event
or status change), so a long-lived conversation in use is kept. Time is a settable clock here.
"""

from __future__ import annotations

import json

import pytest

from citadel.config import CitadelConfig
from citadel.state.conversations import Conversation, Memory, Message, SummaryLine
from citadel.state.factory import make_conversation_store, make_run_store
from citadel.state.runs import EventType, Run
from tests.settable_clock import SettableClock

DAY = 86_400.0
START = 1_800_000_000.0
RETENTION_DAYS = 30


@pytest.fixture
def stores(tmp_path):
    clock = SettableClock(START)
    config = CitadelConfig(home=tmp_path / "home")
    config.agent.retention_days = RETENTION_DAYS
    runs, conversations = make_run_store(config, clock), make_conversation_store(config, clock)
    yield config, clock, runs, conversations
    runs.close()
    conversations.close()


def _session(runs, conversations, name: str, user: str = "alice") -> None:
    conversations.create(Conversation(name, "acme", user))
    conversations.add_message(Message(name, "user", f"question of {name}"))
    conversations.set_summary(name, [SummaryLine(f"summary of {name}", None)], 1)
    conversations.remember(Memory(f"m-{name}", "acme", user, f"note of {name}", name))
    runs.create(Run(f"r-{name}", "acme", user, name, f"question of {name}"))
    runs.append(f"r-{name}", EventType.PROGRESS, {"stage": "route"})
    runs.record_step(f"r-{name}", "step:1", {"status": "done"})


def _purge(config, runs, conversations) -> dict:
    from citadel.catalog.retention import purge_expired
    from citadel.catalog.sqlite import SQLiteCatalog

    catalog = SQLiteCatalog(config.catalog_path)
    try:
        return purge_expired(catalog, config, runs=runs, conversations=conversations)
    finally:
        catalog.close()


def test_sessions_idle_past_the_retention_are_purged_with_everything_derived(stores):
    config, clock, runs, conversations = stores
    _session(runs, conversations, "old")
    clock.now = START + 20 * DAY
    _session(runs, conversations, "recent")
    _session(runs, conversations, "old-but-active")
    clock.now = START + 25 * DAY  # still in use: a new message and a new event
    conversations.add_message(Message("old-but-active", "user", "a follow-up"))
    runs.append("r-old-but-active", EventType.PROGRESS, {"stage": "retrieve"})

    clock.now = START + (RETENTION_DAYS + 1) * DAY
    purged = _purge(config, runs, conversations)

    assert purged["conversations"] == 1 and purged["runs"] == 1, purged
    assert conversations.get("old") is None and conversations.messages("old") == []
    assert conversations.summary("old") == ([], 0)
    assert runs.get("r-old") is None and runs.events("r-old") == [] and runs.steps("r-old") == {}
    assert {m.memory_id for m in conversations.memories("acme", "alice")} == {"m-recent", "m-old-but-active"}
    for name in ("recent", "old-but-active"):
        assert conversations.get(name) is not None and runs.get(f"r-{name}") is not None
        assert runs.events(f"r-{name}")


def test_nothing_younger_than_the_retention_is_purged(stores):
    config, clock, runs, conversations = stores
    _session(runs, conversations, "a")
    clock.now = START + (RETENTION_DAYS - 1) * DAY
    assert _purge(config, runs, conversations) == {"answers": 0, "conversations": 0, "runs": 0}
    assert conversations.get("a") is not None and runs.get("r-a") is not None


def test_the_purge_logs_job_purges_expired_sessions_too(tmp_path, monkeypatch):
    import time

    from typer.testing import CliRunner

    from citadel.cli.main import app

    config = CitadelConfig(home=tmp_path / "home")
    long_ago = SettableClock(time.time() - (RETENTION_DAYS + 5) * DAY)
    runs, conversations = make_run_store(config, long_ago), make_conversation_store(config, long_ago)
    _session(runs, conversations, "expired")
    runs.close()
    conversations.close()
    monkeypatch.setenv("CITADEL_HOME", str(config.home))
    monkeypatch.setenv("CITADEL_AGENT__RETENTION_DAYS", str(RETENTION_DAYS))
    result = CliRunner().invoke(app, ["purge-logs"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["conversations"] == 1 and report["runs"] == 1, report
    runs = make_run_store(config)
    assert runs.get("r-expired") is None
    runs.close()
