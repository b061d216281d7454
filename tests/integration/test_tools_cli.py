"""`citadel tools list|pause|resume` and `citadel approvals list|decide` on a home's files:
a pause the CLI sets is seen by the serving side's pause switch; a decision taken in the CLI is
checked by the policy engine (the limit), recorded once, and the run is driven to its end."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from citadel.cli.main import app
from citadel.config import load_config
from citadel.state.runs import Run, RunStatus
from citadel.tools.approvals import Approval
from citadel.wiring import Wiring

REPO = Path(__file__).resolve().parents[2]
DEALDESK = ["--tenant", "northwind", "--user", "dana", "--groups", "deal-desk"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CITADEL_EMBEDDING__BACKEND", "hash")
    monkeypatch.setenv("CITADEL_TOOLS__REGISTRY_FILE", str(REPO / "examples" / "crm" / "tools.yaml"))
    return Wiring(config=load_config())


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    return result


def test_tools_list_pause_and_resume(home):
    listed = invoke("tools", "list")
    assert listed.exit_code == 0 and "crm.create_discount_approval  T2  approver deal-desk" in listed.output
    assert invoke("tools", "pause", "crm.add_note", "--tenant", "northwind").exit_code == 0
    assert home.pause_switch.is_paused("northwind", "crm.add_note")
    assert not home.pause_switch.is_paused("acme", "crm.add_note")
    assert "paused crm.add_note in northwind" in invoke("tools", "list").output
    assert invoke("tools", "resume", "crm.add_note", "--tenant", "northwind").exit_code == 0
    assert not Wiring(config=home.config).pause_switch.is_paused("northwind", "crm.add_note")
    assert invoke("tools", "pause", "no.such_tool").exit_code == 2


def test_approvals_list_and_decide(home):
    home.run_store.create(Run("run-1", "northwind", "sam", "c1", "Propose 12% for Acme.", groups=("sales",),
                              status=RunStatus.WAITING))
    approval = home.approval_store.request(Approval(
        "", "northwind", "run-1", "s1", "crm.create_discount_approval", "sam",
        {"account_id": "acme", "discount_pct": 12, "term_months": 24}, "deal-desk"))
    listed = invoke("approvals", "list", *DEALDESK)
    assert listed.exit_code == 0 and approval.approval_id in listed.output
    assert approval.approval_id not in invoke("approvals", "list", "--tenant", "northwind", "--user", "sam",
                                              "--groups", "sales").output
    over = invoke("approvals", "decide", approval.approval_id, "--decision", "edit_and_approve",
                  "--edits", '{"discount_pct": 20}', *DEALDESK)
    assert over.exit_code == 1 and "outside_limits" in over.output
    decided = invoke("approvals", "decide", approval.approval_id, "--decision", "reject", "--comment", "too early",
                     *DEALDESK)
    assert decided.exit_code == 0 and decided.output.startswith("rejected")
    assert Wiring(config=home.config).approval_store.get(approval.approval_id).decided_by == "dana"
    again = invoke("approvals", "decide", approval.approval_id, "--decision", "approve", *DEALDESK)
    assert again.exit_code == 1 and "approval_decided" in again.output
