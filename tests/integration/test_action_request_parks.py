"""A bare action request parks for approval, over HTTP: a northwind sales user's
message that only asks for an action, in the documented phrasing, takes the agentic path (the
router's action rule and the CRM tool's intent both see it) and waits for the deal desk — the rules
planner, not a scripted one, reads the request from the message. A plain question beside it still
takes the single-shot path. The CRM and the token service run on loopback; nothing reaches the CRM
before a person decides."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples.crm.__main__ import db_path
from examples.crm.store import CrmStore
from tests.integration.conftest import make_home
from tests.integration.test_api import client_for
from tests.integration.tool_servers import tool_servers

REPO = Path(__file__).resolve().parents[2]
SAM = {"tenant": "northwind", "user": "sam", "groups": ("sales",)}
BARE_ACTION = "Propose a 5% discount for 24 months for acme."


@pytest.fixture
def deployment(tmp_path):
    home = make_home(tmp_path / "home", CITADEL_TOOLS__REGISTRY_FILE=str(REPO / "examples" / "crm" / "tools.yaml"))
    with tool_servers(home.config):  # the token service and the CRM on loopback
        with client_for(home) as client:
            yield home, client, CrmStore(db_path(Path(home.config.home).resolve()))
            client.app.state.services.runs.wait_for_runs(60)


def post_message(client, home, content: str) -> tuple[dict, list[dict]]:
    conversation = client.post("/v1/conversations", headers=home.headers(**SAM)).json()["conversation_id"]
    posted = client.post(f"/v1/conversations/{conversation}/messages", headers=home.headers(**SAM),
                         json={"content": content})
    assert posted.status_code == 202, posted.text
    run_id = posted.json()["run_id"]
    client.app.state.services.runs.wait_for_runs(60)
    run = client.get(f"/v1/runs/{run_id}", headers=home.headers(**SAM)).json()
    events = client.get(f"/v1/runs/{run_id}/events",
                        headers={**home.headers(**SAM), "accept": "application/json"}).json()
    return run, events


def route_of(events: list[dict]) -> list[str]:
    return [e["data"]["path"] for e in events if e["type"] == "progress" and e["data"].get("stage") == "route"]


def test_a_bare_action_request_parks_for_approval(deployment):
    home, client, crm = deployment
    run, events = post_message(client, home, BARE_ACTION)
    assert route_of(events) == ["agentic"]
    assert run["status"] == "waiting", run
    [required] = [e["data"] for e in events if e["type"] == "approval_required"]
    assert required["tool"] == "crm.create_discount_approval" and required["approver_group"] == "deal-desk"
    assert not [e for e in events if e["type"] == "final"]  # no "the documents do not contain …" reply
    [pending] = client.get("/v1/approvals", headers=home.headers(tenant="northwind", user="dana",
                                                                   groups=("deal-desk",))).json()["approvals"]
    assert pending["proposed_args"] == {"account_id": "acme", "discount_pct": 5, "term_months": 24}
    assert crm.count_approvals("northwind") == 0  # nothing happens before a person decides


def test_a_plain_question_still_takes_the_single_shot_path(deployment):
    home, client, _ = deployment
    run, events = post_message(client, home, "What is the standard discount sales representatives may offer?")
    assert route_of(events) == ["single_shot"]
    assert run["status"] == "succeeded" and not [e for e in events if e["type"] == "approval_required"]
