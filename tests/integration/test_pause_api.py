"""The pause switch over HTTP: an admin pauses a tool or the model per tenant or
everywhere, without a restart; a paused tool refuses with `tool_paused`, a paused model answers with
quotes (`model_paused`), everything else keeps working; a tenant admin cannot pause everywhere."""

from __future__ import annotations

from citadel.identity.credentials import add_credential
from tests.integration.test_approvals_api import SAM, clock, deployment, start_run  # noqa: F401 (fixtures)
from tests.integration.test_tool_calls import ScriptedPlanner

NOTE = {"id": "s1", "ask": "note the renewal", "tool": "crm.add_note",
        "args": {"account_id": "acme", "text": "Renewal next month."}}


def _note_run(client, home) -> dict:
    client.app.state.services.wiring.orchestrator.planner = ScriptedPlanner([NOTE])
    run_id = start_run(client, home)
    client.app.state.services.runs.wait_for_runs(60)
    events = client.get(f"/v1/runs/{run_id}/events", headers={**home.headers(**SAM), "accept": "application/json"})
    return [e["data"] for e in events.json() if e["type"] == "final"][-1]


def test_a_paused_tool_refuses_until_resumed_and_nothing_else_stops(deployment):  # noqa: F811
    home, client, crm = deployment
    admin = home.admin_headers()
    listed = client.get("/v1/admin/tools", headers=admin).json()
    assert {"model", "crm.add_note", "crm.create_discount_approval"} <= set(listed["targets"])
    paused = client.post("/v1/admin/tools/crm.add_note:pause", json={"tenant_id": "northwind"}, headers=admin)
    assert paused.status_code == 200 and paused.json()["paused"]
    final = _note_run(client, home)
    assert [(a["status"], a["error"]) for a in final["actions"]] == [("failed", "tool_paused")]
    assert crm.count_notes("northwind") == 0
    # retrieval and answers keep working while a tool is paused
    assert client.post("/v1/answer", json={"question": "What is the hotel limit per night in London?"},
                       headers=home.headers()).status_code == 200
    assert client.post("/v1/admin/tools/crm.add_note:resume", json={"tenant_id": "northwind"},
                       headers=admin).status_code == 200
    final = _note_run(client, home)
    assert [a["status"] for a in final["actions"]] == ["ok"] and crm.count_notes("northwind") == 1


def test_a_paused_model_answers_with_quotes_for_that_tenant_only(deployment):  # noqa: F811
    home, client, _ = deployment
    admin = home.admin_headers()
    question = {"question": "What is the hotel limit per night in London?"}
    assert client.post("/v1/admin/tools/model:pause", json={"tenant_id": "acme"}, headers=admin).status_code == 200
    answer = client.post("/v1/answer", json=question, headers=home.headers()).json()
    assert "model_paused" in answer["degraded"] and answer["citations"]
    client.post("/v1/admin/tools/model:resume", json={"tenant_id": "acme"}, headers=admin)
    again = client.post("/v1/answer", json={**question, "question": question["question"] + " Thanks."},
                        headers=home.headers()).json()
    assert "model_paused" not in again["degraded"]


def test_only_a_platform_admin_pauses_everywhere_and_unknown_tools_are_404(deployment):  # noqa: F811
    home, client, _ = deployment
    tenant_admin = add_credential(home.config.credentials_path, "acme-ops", ["acme"], admin=True)
    headers = {"authorization": f"Bearer {tenant_admin}"}
    everywhere = client.post("/v1/admin/tools/crm.add_note:pause", json={"tenant_id": None}, headers=headers)
    assert everywhere.status_code == 403
    other = client.post("/v1/admin/tools/crm.add_note:pause", json={"tenant_id": "northwind"}, headers=headers)
    assert other.status_code == 403
    assert client.post("/v1/admin/tools/crm.add_note:pause", json={"tenant_id": "acme"},
                       headers=headers).status_code == 200
    assert client.post("/v1/admin/tools/no.such_tool:pause", json={"tenant_id": "acme"},
                       headers=home.admin_headers()).status_code == 404
    assert client.post("/v1/admin/tools/crm.add_note:pause", json={"tenant_id": None},
                       headers=home.admin_headers()).status_code == 200
