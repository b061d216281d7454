"""Review tasks for failed checks on answers, over HTTP: two versions of a policy
disagree and no reliable effective date says which applies, so the answer is held — `202
review_pending` on /v1/answer, a `review_pending` event on a run — and a task goes to the documents'
owner. The owner fixes the source (dates) and marks it corrected: asked again, every check runs again
and the answer goes out. A rejection closes it with the reviewer's word; a correction that changes
nothing opens the next round."""

from __future__ import annotations

import time

import pytest

from tests.integration.conftest import make_home
from tests.integration.test_api import client_for

STAFF = {"tenant": "acme", "user": "alice", "groups": ("staff",)}
OWNER = {"tenant": "acme", "user": "omar", "groups": ("finance-ops",)}
QUESTION = "What is the daily meal allowance on business trips?"
OLD = "# Meal Allowance Policy 2024\n\n## Daily meals\n\nThe daily meal allowance on business trips is 40 euros.\n"
NEW = "# Meal Allowance Policy\n\n## Daily meals\n\nThe daily meal allowance on business trips is 55 euros.\n"


@pytest.fixture
def deployment(tmp_path):
    home = make_home(tmp_path / "home", CITADEL_ANSWER__MIN_VECTOR_SCORE="0",
                     CITADEL_ANSWER__STRONG_VECTOR_SCORE="0.9")
    with client_for(home) as client:
        upload(client, home, "meals-2024", OLD)
        upload(client, home, "meals", NEW)
        yield home, client
        client.app.state.services.runs.wait_for_runs(60)
        client.app.state.services.admin.wait_for_jobs(60)


def upload(client, home, document_id: str, text: str, **fields: str) -> None:
    doc = {"document_id": document_id, "filename": f"{document_id}.md", "groups": ["staff"], "text": text,
           "owner": "finance-ops", **fields}
    response = client.post("/v1/admin/tenants/acme/documents", json=doc, headers=home.admin_headers())
    assert response.status_code == 202, response.text
    client.app.state.services.admin.wait_for_jobs(60)
    job = client.get(f"/v1/admin/jobs/{response.json()['job_id']}", headers=home.admin_headers()).json()
    assert job["status"] == "succeeded", job


def ask(client, home):
    return client.post("/v1/answer", json={"question": QUESTION}, headers=home.headers(**STAFF))


def decide(client, home, review_id: str, decision: str, comment: str = ""):
    response = client.post(f"/v1/approvals/{review_id}:decide", headers=home.headers(**OWNER),
                           json={"decision": decision, "comment": comment})
    assert response.status_code == 200, response.text
    return response.json()


def test_an_undated_conflict_holds_the_answer_until_the_owner_fixes_the_dates(deployment):
    home, client = deployment
    held = ask(client, home)
    assert held.status_code == 202, held.text
    body = held.json()
    assert body["status"] == "review_pending" and body["reason"] == "conflict_undated"
    assert body["reviewers"] == "finance-ops" and "40" not in body["message"] and "55" not in body["message"]
    assert ask(client, home).json()["review_id"] == body["review_id"]  # asking again: the same task
    assert client.get("/v1/approvals", headers=home.headers(**STAFF)).json()["approvals"] == []
    [task] = client.get("/v1/approvals", headers=home.headers(**OWNER)).json()["approvals"]
    assert task["kind"] == "review" and task["approval_id"] == body["review_id"]

    upload(client, home, "meals-2024", OLD, effective_date="2024-01-01")  # the owner fixes the source …
    upload(client, home, "meals", NEW, effective_date="2025-01-01")
    decide(client, home, body["review_id"], "correct", "dated both")  # … and says so
    answered = ask(client, home)
    assert answered.status_code == 200, answered.text
    assert not answered.json()["refused"] and "55" in answered.json()["answer"]
    assert answered.json()["outcome"] == "answered"


def test_a_correction_that_fixes_nothing_opens_the_next_round_and_a_rejection_closes_it(deployment):
    home, client = deployment
    first = ask(client, home).json()
    edited = client.post(f"/v1/approvals/{first['review_id']}:decide", headers=home.headers(**OWNER),
                         json={"decision": "correct", "edits": {"answer": "55 euros"}})
    assert edited.status_code == 422  # a source is corrected at the source, not by editing the answer
    decide(client, home, first["review_id"], "correct")
    second = ask(client, home)
    assert second.status_code == 202 and second.json()["review_id"] != first["review_id"]
    decide(client, home, second.json()["review_id"], "reject", "Ask Finance directly.")
    closed = ask(client, home)
    assert closed.status_code == 200
    assert closed.json()["refused"] and closed.json()["reason"] == "review_rejected"
    assert closed.json()["outcome"] == "refused"
    assert "Ask Finance directly." in closed.json()["answer"] and closed.json()["citations"] == []


def test_a_run_holds_its_answer_with_a_review_pending_event_and_resumes_when_corrected(deployment):
    home, client = deployment
    conversation = client.post("/v1/conversations", headers=home.headers(**STAFF)).json()["conversation_id"]
    posted = client.post(f"/v1/conversations/{conversation}/messages", headers=home.headers(**STAFF),
                         json={"content": f"{QUESTION} Also, which document sets it?"})
    run_id = posted.json()["run_id"]
    client.app.state.services.runs.wait_for_runs(60)
    events = client.get(f"/v1/runs/{run_id}/events",
                        headers={**home.headers(**STAFF), "accept": "application/json"}).json()
    [held] = [e["data"] for e in events if e["type"] == "review_pending"]
    assert held["reason"] == "conflict_undated" and not [e for e in events if e["type"] == "final"]
    assert client.get(f"/v1/runs/{run_id}", headers=home.headers(**STAFF)).json()["status"] == "waiting"
    upload(client, home, "meals-2024", OLD, effective_date="2024-01-01")
    upload(client, home, "meals", NEW, effective_date="2025-01-01")
    decide(client, home, held["review_id"], "correct")
    client.app.state.services.runs.wait_for_runs(60)
    deadline = time.monotonic() + 30
    while client.get(f"/v1/runs/{run_id}", headers=home.headers(**STAFF)).json()["status"] == "waiting":
        assert time.monotonic() < deadline, "the corrected run never resumed"
        time.sleep(0.1)
    events = client.get(f"/v1/runs/{run_id}/events",
                        headers={**home.headers(**STAFF), "accept": "application/json"}).json()
    [final] = [e["data"] for e in events if e["type"] == "final"]
    assert not final["refused"] and "55" in final["answer"]


def test_the_owner_sees_the_held_answers_task_on_the_reviewer_page(deployment):
    home, client = deployment
    assert ask(client, home).status_code == 202
    page = client.get("/review", headers=home.headers(**OWNER))
    assert page.status_code == 200
    html = page.text
    assert "Versions disagree and no reliable date settles it" in html and "no effective date" in html
    assert "Meal Allowance Policy 2024, Daily meals" in html and "Meal Allowance Policy, Daily meals" in html
    for label in ("Save correction", "Request more information", "Reject"):
        assert label in html
    assert "Nothing waiting for you." in client.get("/review", headers=home.headers(**STAFF)).text


def test_a_run_on_the_single_shot_path_is_held_too_and_asks_again_when_corrected(deployment):
    home, client = deployment
    conversation = client.post("/v1/conversations", headers=home.headers(**STAFF)).json()["conversation_id"]
    run_id = client.post(f"/v1/conversations/{conversation}/messages", headers=home.headers(**STAFF),
                         json={"content": QUESTION}).json()["run_id"]
    client.app.state.services.runs.wait_for_runs(60)
    json_events = {**home.headers(**STAFF), "accept": "application/json"}
    events = client.get(f"/v1/runs/{run_id}/events", headers=json_events).json()
    assert [e["data"]["path"] for e in events if e["data"].get("stage") == "route"] == ["single_shot"]
    [held] = [e["data"] for e in events if e["type"] == "review_pending"]
    assert client.get(f"/v1/runs/{run_id}", headers=home.headers(**STAFF)).json()["status"] == "waiting"
    decide(client, home, held["review_id"], "reject", "Superseded; see the 2025 memo.")
    client.app.state.services.runs.wait_for_runs(60)
    deadline = time.monotonic() + 30
    while client.get(f"/v1/runs/{run_id}", headers=home.headers(**STAFF)).json()["status"] == "waiting":
        assert time.monotonic() < deadline, "the decided run never resumed"
        time.sleep(0.1)
    [final] = [e["data"] for e in client.get(f"/v1/runs/{run_id}/events", headers=json_events).json()
               if e["type"] == "final"]
    assert final["refused"] and final["reason"] == "review_rejected" and "2025 memo" in final["answer"]
    assert final["outcome"] == "refused"
    run = client.get(f"/v1/runs/{run_id}", headers=home.headers(**STAFF)).json()
    assert run["outcome"] == "refused"
