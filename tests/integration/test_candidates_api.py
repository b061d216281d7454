"""Feedback becomes a test item over HTTP: a user's thumbs-down with a reason queues one
candidate (once, however often the vote is sent) holding the question and the cited sources but not the
user; the tenant's admin lists it, promotes it with a label, and `citadel eval candidates export` writes
a file the regression harness loads. Only an admin of that tenant may list, promote or dismiss."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from citadel.eval.rag import load_set
from citadel.identity.credentials import add_credential
from tests.integration.test_api import assert_error, client_for

QUESTION = "What is the hotel limit per night in London?"
CANDIDATES = "/v1/admin/candidates"


@pytest.fixture
def client(home):
    with client_for(home) as c:
        yield c


def thumbs_down(client, home, answer_id: str, **vote) -> None:
    body = {"vote": "down", "reason": "wrong_source", "comment": "London is 300 USD now; ask alice@acme.example",
            **vote}
    response = client.post(f"/v1/answers/{answer_id}/feedback", json=body, headers=home.headers())
    assert response.status_code == 200, response.text


def test_a_thumbs_down_becomes_a_labeled_item_the_regression_set_loads(client, home, tmp_path):
    answer = client.post("/v1/answer", json={"question": QUESTION}, headers=home.headers()).json()
    cited = sorted({(c["document_id"], c["version"]) for c in answer["citations"]})
    assert cited and not answer["refused"]
    thumbs_down(client, home, answer["request_id"])
    thumbs_down(client, home, answer["request_id"])  # the same vote again: still one item
    thumbs_down(client, home, answer["request_id"], vote="up", reason=None)  # no thumbs-down: no item

    listed = client.get(CANDIDATES, params={"tenant": "acme"}, headers=home.admin_headers())
    assert listed.status_code == 200, listed.text
    [candidate] = listed.json()["candidates"]
    item = candidate["item"]
    assert (candidate["source"], candidate["status"], item["question"], item["reason"]) == \
        ("answer_feedback", "pending", QUESTION, "wrong_source")
    assert sorted((s["document_id"], s["version"]) for s in item["sources"]) == cited
    assert item["answer"] == answer["answer"] and item["comment"] == "London is 300 USD now; ask [email]"
    assert "alice" not in json.dumps(candidate)  # the voter is in the feedback row, never in the item
    for params in ({"source": "tool:crm.create_discount_approval"}, {"after_id": candidate["id"], "limit": 1}):
        assert client.get(CANDIDATES, params={"tenant": "acme", **params},
                          headers=home.admin_headers()).json()["candidates"] == []

    document = cited[0][0]
    promote = f"{CANDIDATES}/{candidate['id']}/promote"
    unknown = client.post(promote, json={"expect": "answer", "expected_documents": ["no-such-doc"]},
                          headers=home.admin_headers())
    assert_error(unknown, 422, "invalid_request")
    label = {"expect": "answer", "expected_documents": [document], "expected_answer": ["180 USD"]}
    promoted = client.post(promote, json=label, headers=home.admin_headers())
    assert promoted.status_code == 200, promoted.text
    assert promoted.json()["status"] == "promoted" and promoted.json()["decided_by"] == "ops"
    assert_error(client.post(promote, json=label, headers=home.admin_headers()), 409, "candidate_decided")
    assert client.get(CANDIDATES, params={"tenant": "acme"}, headers=home.admin_headers()).json()["candidates"] == []

    out = tmp_path / "feedback.jsonl"
    env = {"CITADEL_HOME": str(home.config.home), "CITADEL_EMBEDDING__BACKEND": "hash"}
    from citadel.cli.main import app

    exported = CliRunner().invoke(app, ["eval", "candidates", "export", "--tenant", "acme", "--out", str(out)], env=env)
    assert exported.exit_code == 0, exported.output
    assert json.loads(exported.output)["answers"] == 1
    [loaded] = load_set(out)
    assert (loaded.tenant, loaded.question, loaded.expect, loaded.expected_documents, loaded.expected_answer) == \
        ("acme", QUESTION, "answer", (document,), ("180 USD",))
    shown = CliRunner().invoke(app, ["eval", "candidates", "list", "--status", "promoted", "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    assert [row["id"] for row in json.loads(shown.output)] == [candidate["id"]]


def test_only_an_admin_of_the_tenant_lists_promotes_or_dismisses(client, home):
    answer = client.post("/v1/answer", json={"question": QUESTION}, headers=home.headers()).json()
    thumbs_down(client, home, answer["request_id"])
    [candidate] = client.get(CANDIDATES, params={"tenant": "acme"}, headers=home.admin_headers()).json()["candidates"]
    promote, dismiss = (f"{CANDIDATES}/{candidate['id']}/{action}" for action in ("promote", "dismiss"))
    label = {"expect": "refuse"}

    service = {"authorization": f"Bearer {home.service_token}"}  # a service, not an admin
    assert_error(client.get(CANDIDATES, params={"tenant": "acme"}, headers=service), 403, "admin_required")
    assert_error(client.post(promote, json=label, headers=service), 403, "admin_required")
    assert_error(client.post(dismiss, headers=service), 403, "admin_required")
    user = home.headers()  # an end user of the tenant
    assert_error(client.get(CANDIDATES, params={"tenant": "acme"}, headers=user), 403, "admin_required")
    assert_error(client.post(promote, json=label, headers=user), 403, "admin_required")

    other = {"authorization": f"Bearer {add_credential(home.config.credentials_path, 'globex-ops', ['globex'], admin=True)}"}
    assert_error(client.get(CANDIDATES, params={"tenant": "acme"}, headers=other), 403, "tenant_not_allowed")
    assert_error(client.post(promote, json=label, headers=other), 404, "not_found")  # ids are not probed
    assert client.get(CANDIDATES, params={"tenant": "globex"}, headers=other).json()["candidates"] == []

    assert_error(client.post(promote, json={"expect": "approve", "final_args": {}}, headers=home.admin_headers()),
                 422, "invalid_request")  # a tool item's label on an answer item
    dismissed = client.post(dismiss, headers=home.admin_headers())
    assert dismissed.status_code == 200 and dismissed.json()["status"] == "dismissed"
    assert_error(client.post(promote, json=label, headers=home.admin_headers()), 409, "candidate_decided")
    assert_error(client.post(f"{CANDIDATES}/{2**63}/dismiss", headers=home.admin_headers()), 422, "invalid_request")
    assert_error(client.get(CANDIDATES, params={"tenant": "acme", "status": "maybe"}, headers=home.admin_headers()),
                 422, "invalid_request")
