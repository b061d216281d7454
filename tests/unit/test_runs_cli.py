"""`citadel chat`, `citadel runs show` and `citadel runs events` on a tiny home with the hash
embedder: a chat line starts a run that answers with citations, and the run's log is readable after."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from citadel.cli.main import app
from citadel.ingest.sources import AclSpec, discover
from tests.integration.conftest import EXAMPLES


def _home(tmp_path, monkeypatch):
    from citadel.wiring import Wiring
    from citadel.config import load_config

    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CITADEL_EMBEDDING__BACKEND", "hash")
    wiring = Wiring(load_config())
    wiring.ingestor().ingest("acme", discover([EXAMPLES / "acme"], trust_front_matter=True),
                             AclSpec.from_file(EXAMPLES / "acme" / "acl.yaml"))
    wiring.catalog.close()


def test_chat_runs_a_question_and_the_run_log_can_be_read(tmp_path, monkeypatch):
    _home(tmp_path, monkeypatch)
    runner = CliRunner()
    chat = runner.invoke(app, ["chat", "--tenant", "acme", "--user", "alice", "--groups", "staff"],
                         input="What is the hotel limit per night?\nexit\n", catch_exceptions=False)
    assert chat.exit_code == 0, chat.output
    assert "assistant>" in chat.output and "[1]" in chat.output
    [run_id] = re.findall(r"\brun ([0-9a-f]{32})\b", chat.output)
    shown = runner.invoke(app, ["runs", "show", run_id], catch_exceptions=False)
    assert shown.exit_code == 0 and json.loads(shown.stdout)["status"] == "succeeded"
    lines = runner.invoke(app, ["runs", "events", run_id, "--after", "1"], catch_exceptions=False).stdout.splitlines()
    events = [json.loads(line) for line in lines]
    assert events[0]["seq"] == 2 and events[-1]["type"] == "final"
    assert runner.invoke(app, ["runs", "show", "no-such-run"]).exit_code == 1

