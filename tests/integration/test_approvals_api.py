"""Approvals over HTTP (issue 16, item 4), against the example CRM on loopback: a sales user's run
proposes a 12% 24-month discount approval for Acme and parks; a deal-desk reviewer sees it, is refused
at 20% by the limit, edits the term and approves; the run resumes, the CRM holds one approval, and the
run answers with its id. Bad input: unknown approval 404, a non-member 403, a second decision 409,
edits that fail the schema 422 — never a 500."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from citadel.identity.credentials import ALL_TENANTS
from citadel.tools.caller import tool_caller
from examples.crm.__main__ import db_path
from examples.crm.launcher import start_crm, stop_crm
from examples.crm.store import CrmStore
from tests.integration.conftest import make_home
from tests.integration.test_api import client_for
from tests.integration.test_tool_calls import ScriptedPlanner
from tests.settable_clock import SettableClock

REPO = Path(__file__).resolve().parents[2]
SAM = {"tenant": "northwind", "user": "sam", "groups": ("sales",)}
DANA = {"tenant": "northwind", "user": "dana", "groups": ("deal-desk",)}
PROPOSAL = {"id": "s1", "ask": "propose the multi-year discount", "tool": "crm.create_discount_approval",
            "args": {"account_id": "acme", "discount_pct": 12, "term_months": 24}}


@pytest.fixture
def clock():
    return SettableClock(time.time())


@pytest.fixture
def deployment(tmp_path, clock):
    home = make_home(tmp_path / "home", CITADEL_TOOLS__REGISTRY_FILE=str(REPO / "examples" / "crm" / "tools.yaml"))
    tool_caller(home.config, [ALL_TENANTS])  # the tools' credential exists before the CRM reads the home
    server = start_crm(Path(home.config.home))
    home.config.tools.endpoints = {"crm": server.url}
    try:
        with client_for(home, clock=clock) as client:
            client.app.state.services.wiring.orchestrator.planner = ScriptedPlanner([PROPOSAL])
            yield home, client, CrmStore(db_path(Path(home.config.home).resolve()))
            client.app.state.services.runs.wait_for_runs(60)
    finally:
        stop_crm(Path(home.config.home))


def events_of(client, home, run_id: str, now: float | None = None) -> list[dict]:
    return client.get(f"/v1/runs/{run_id}/events",
                      headers={**home.headers(**SAM, now=now), "accept": "application/json"}).json()


def start_run(client, home) -> str:
    conversation = client.post("/v1/conversations", headers=home.headers(**SAM)).json()["conversation_id"]
    posted = client.post(f"/v1/conversations/{conversation}/messages", headers=home.headers(**SAM),
                         json={"content": "Acme renews next month. Are they eligible for the multi-year discount? "
                                          "Propose 12% for 24 months."})
    assert posted.status_code == 202, posted.text
    client.app.state.services.runs.wait_for_runs(60)
    return posted.json()["run_id"]


def test_the_proposal_parks_the_run_until_a_reviewer_edits_and_approves_it(deployment):
    home, client, crm = deployment
    run_id = start_run(client, home)
    run = client.get(f"/v1/runs/{run_id}", headers=home.headers(**SAM)).json()
    assert run["status"] == "waiting"
    [required] = [e["data"] for e in events_of(client, home, run_id) if e["type"] == "approval_required"]
    assert required["tool"] == "crm.create_discount_approval" and required["approver_group"] == "deal-desk"
    assert crm.count_approvals("northwind") == 0  # nothing happens before a person decides

    assert client.get("/v1/approvals", headers=home.headers(**SAM)).json()["approvals"] == []  # not a reviewer
    [pending] = client.get("/v1/approvals", headers=home.headers(**DANA)).json()["approvals"]
    assert pending["approval_id"] == required["approval_id"] and pending["proposed_args"]["discount_pct"] == 12
    decide = f"/v1/approvals/{pending['approval_id']}:decide"

    too_much = client.post(decide, headers=home.headers(**DANA),
                           json={"decision": "edit_and_approve", "edits": {"discount_pct": 20}})
    assert too_much.status_code == 403 and too_much.json()["error"]["code"] == "outside_limits"
    approved = client.post(decide, headers=home.headers(**DANA),
                           json={"decision": "edit_and_approve", "edits": {"term_months": 36}, "comment": "3 years"})
    assert approved.status_code == 200, approved.text
    assert approved.json()["final_args"] == {"account_id": "acme", "discount_pct": 12, "term_months": 36}
    assert approved.json()["decided_by"] == "dana"
    assert client.post(decide, headers=home.headers(**DANA), json={"decision": "reject"}).status_code == 409

    client.app.state.services.runs.wait_for_runs(60)
    deadline = time.monotonic() + 30
    while client.get(f"/v1/runs/{run_id}", headers=home.headers(**SAM)).json()["status"] != "succeeded":
        assert time.monotonic() < deadline, "the approved run never finished"
        time.sleep(0.1)
    assert crm.count_approvals("northwind") == 1
    [record] = crm.list_approvals("northwind", "acme")
    assert record.term_months == 36 and record.discount_pct == 12 and record.requested_by == "sam"
    final = [e["data"] for e in events_of(client, home, run_id) if e["type"] == "final"][-1]
    assert record.approval_id in final["answer"]
    assert [a["status"] for a in final["actions"]] == ["ok"]


def test_bad_decisions_get_clear_errors(deployment):
    home, client, crm = deployment
    start_run(client, home)
    [pending] = client.get("/v1/approvals", headers=home.headers(**DANA)).json()["approvals"]
    decide = f"/v1/approvals/{pending['approval_id']}:decide"
    assert client.post("/v1/approvals/nope:decide", headers=home.headers(**DANA),
                       json={"decision": "approve"}).status_code == 404
    other_tenant = {**DANA, "tenant": "acme"}
    assert client.post(decide, headers=home.headers(**other_tenant), json={"decision": "approve"}).status_code == 404
    assert client.post(decide, headers=home.headers(**SAM), json={"decision": "approve"}).status_code == 403
    bad = client.post(decide, headers=home.headers(**DANA),
                      json={"decision": "edit_and_approve", "edits": {"term_months": "forever"}})
    assert bad.status_code == 422
    assert client.post(decide, headers=home.headers(**DANA), json={"decision": "maybe"}).status_code == 422
    rejected = client.post(decide, headers=home.headers(**DANA), json={"decision": "reject", "comment": "no"})
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert crm.count_approvals("northwind") == 0


def test_escalation_reaches_the_lead_group_and_expiry_rejects_without_running_the_tool(deployment, clock):
    home, client, crm = deployment
    run_id = start_run(client, home)
    lead = {"tenant": "northwind", "user": "lee", "groups": ("sales-directors",)}
    approvals = client.app.state.services.approvals
    assert client.get("/v1/approvals", headers=home.headers(**lead)).json()["approvals"] == []
    clock.now += 3_601  # past escalate_after_s (1 h): the lead group may decide it too
    assert approvals.sweep() == (1, 0)
    [escalated] = client.get("/v1/approvals", headers=home.headers(**lead, now=clock.now)).json()["approvals"]
    assert escalated["escalated"] and "sales-directors" in escalated["deciders"]
    clock.now += 86_400  # past expire_after_s: silence never approves, expiry counts as rejected
    assert approvals.sweep() == (0, 1)
    client.app.state.services.runs.wait_for_runs(60)
    final = [e["data"] for e in events_of(client, home, run_id, clock.now) if e["type"] == "final"][-1]
    assert [a["error"] for a in final["actions"]] == ["approval_expired"]
    assert "Not done: crm.create_discount_approval (approval_expired)." in final["answer"]
    assert crm.count_approvals("northwind") == 0
    stages = [e["data"].get("stage") for e in events_of(client, home, run_id, clock.now) if e["type"] == "progress"]
    assert "approval_escalated" in stages and "approval_decided" in stages
