"""A user can delete all of their own data in one call.

Before: a user could delete one conversation at a time (its runs and their event logs stayed), and
nothing deleted the runs at all. Now `DELETE /v1/me/data` removes the calling user's conversations
(messages, summaries), memories, runs and their event logs, in this tenant; it is recorded in the
audit log; another user's data — and the same user id in another tenant — is untouched. Driven
through the HTTP app; the stores are read directly afterwards.
"""

from __future__ import annotations

import pytest

from tests.integration.conftest import make_home
from tests.integration.test_api import client_for

QUESTION = "Remember that my desk is B12. What is the hotel limit per night in London?"
ALICE = {"user": "alice"}
BOB = {"user": "bob"}
ALICE_ELSEWHERE = {"user": "alice", "tenant": "northwind"}


@pytest.fixture
def client(tmp_path):
    home = make_home(tmp_path / "home")
    with client_for(home) as c:
        c.home = home
        yield c
    c.app.state.services.runs.wait_for_runs(60)


def _session(client, **user) -> dict:
    """A conversation with one message (a run, its events and a memory), as this user."""
    headers = client.home.headers(**user)
    created = client.post("/v1/conversations", headers=headers)
    assert created.status_code == 201, created.text
    conversation = created.json()["conversation_id"]
    posted = client.post(f"/v1/conversations/{conversation}/messages", json={"content": QUESTION}, headers=headers)
    assert posted.status_code == 202, posted.text
    client.app.state.services.runs.wait_for_runs(60)
    return {"conversation_id": conversation, "run_id": posted.json()["run_id"], "user": user}


def _stored(client, session: dict) -> dict:
    """What the stores hold of a session (read directly, not through the API)."""
    services = client.app.state.services.runs
    principal = {"tenant": "acme", **session["user"]}
    return {
        "conversation": services.conversations.get(session["conversation_id"]) is not None,
        "messages": len(services.conversations.messages(session["conversation_id"])),
        "memories": len(services.conversations.memories(principal["tenant"], principal["user"])),
        "run": services.runs.get(session["run_id"]) is not None,
        "events": len(services.runs.events(session["run_id"])),
        "steps": len(services.runs.steps(session["run_id"])),
    }


def test_deleting_my_data_removes_my_sessions_only_and_is_audited(client):
    mine = [_session(client, **ALICE), _session(client, **ALICE)]
    others = [_session(client, **BOB), _session(client, **ALICE_ELSEWHERE)]
    for session in mine + others:
        held = _stored(client, session)
        assert all(held.values()), held  # each session has all its parts before the deletion

    response = client.delete("/v1/me/data", headers=client.home.headers(**ALICE))
    assert response.status_code == 200, response.text
    assert response.json()["deleted"]["conversations"] == 2 and response.json()["deleted"]["runs"] == 2

    headers = client.home.headers(**ALICE)
    for session in mine:
        assert not any(_stored(client, session).values()), _stored(client, session)
        assert client.get(f"/v1/runs/{session['run_id']}", headers=headers).status_code == 404
        assert client.get(f"/v1/runs/{session['run_id']}/events", headers={**headers, "accept": "application/json"}
                          ).status_code == 404
        assert client.delete(f"/v1/conversations/{session['conversation_id']}", headers=headers).status_code == 404
    for session in others:
        held = _stored(client, session)
        assert all(held.values()), held
        assert client.get(f"/v1/runs/{session['run_id']}", headers=client.home.headers(**session["user"])
                          ).status_code == 200

    audit = client.app.state.services.wiring.catalog.audit_log("acme")
    rows = [row for row in audit if row["action"] == "user_data_deleted"]
    assert len(rows) == 1 and rows[0]["target"] == "alice", rows
    assert rows[0]["detail"]["conversations"] == 2 and rows[0]["detail"]["runs"] == 2


def test_deleting_my_data_twice_is_harmless(client):
    _session(client, **ALICE)
    headers = client.home.headers(**ALICE)
    assert client.delete("/v1/me/data", headers=headers).status_code == 200
    again = client.delete("/v1/me/data", headers=headers)
    assert again.status_code == 200 and again.json()["deleted"]["conversations"] == 0


def test_deleting_my_data_needs_a_verified_user(client):
    response = client.delete("/v1/me/data", headers={"authorization": f"Bearer {client.home.service_token}"})
    assert response.status_code == 401
