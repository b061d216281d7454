"""The runs API over HTTP (fused in-process services, no Ray): conversations scoped to their
user, a message starting a run, its events as JSON and as Server-Sent Events replayed from any seq,
cancellation, feedback stored with the cited versions, and clear errors for bad input."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.test_api import client_for

QUESTION = "What is the hotel limit per night in London?"


@pytest.fixture
def client(home):
    with client_for(home) as c:
        yield c
    c.app.state.services.runs.wait_for_runs(60)


def _run_to_the_end(client, home, content=QUESTION, **user) -> tuple[str, str, list[dict]]:
    created = client.post("/v1/conversations", headers=home.headers(**user))
    assert created.status_code == 201, created.text
    conversation = created.json()["conversation_id"]
    posted = client.post(f"/v1/conversations/{conversation}/messages", json={"content": content},
                         headers=home.headers(**user))
    assert posted.status_code == 202, posted.text
    run_id = posted.json()["run_id"]
    client.app.state.services.runs.wait_for_runs(60)
    events = client.get(f"/v1/runs/{run_id}/events", headers={**home.headers(**user), "accept": "application/json"})
    assert events.status_code == 200, events.text
    return conversation, run_id, events.json()


def _sse(text: str) -> list[dict]:
    """The events of a Server-Sent Events body, checking each `id:` is its event's seq."""
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if fields:
            event = json.loads(fields["data"])
            assert int(fields["id"]) == event["seq"] and fields["event"] == event["type"]
            events.append(event)
    return events


def test_a_message_starts_a_run_whose_events_end_in_one_final(client, home):
    _, run_id, events = _run_to_the_end(client, home)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    finals = [e for e in events if e["type"] == "final"]
    assert len(finals) == 1 and events[-1] is finals[0]
    single_shot = client.post("/v1/answer", json={"question": QUESTION}, headers=home.headers()).json()
    assert finals[0]["data"]["answer"] == single_shot["answer"] and finals[0]["data"]["citations"]
    assert finals[0]["data"]["outcome"] == single_shot["outcome"] == "answered"
    assert all("key" not in e["data"] for e in events)  # the orchestrator's bookkeeping stays inside
    run = client.get(f"/v1/runs/{run_id}", headers=home.headers()).json()
    assert run["status"] == "succeeded" and run["path"] in ("single_shot", "agentic") and run["steps"]
    assert run["outcome"] == "answered"


def test_replay_after_a_seq_gives_every_later_event_once_over_sse(client, home):
    _, run_id, events = _run_to_the_end(client, home)
    assert len(events) > 5  # disconnect after event 4, reconnect with after_seq=4 (and with Last-Event-ID: 4)
    cut = 4
    replay = client.get(f"/v1/runs/{run_id}/events?after_seq={cut}", headers=home.headers())
    assert replay.status_code == 200 and replay.headers["content-type"].startswith("text/event-stream")
    assert _sse(replay.text) == events[cut:]
    resumed = client.get(f"/v1/runs/{run_id}/events", headers={**home.headers(), "last-event-id": str(cut)})
    assert _sse(resumed.text) == events[cut:]


def test_the_final_event_over_sse_carries_the_outcome(client, home):
    _, run_id, _ = _run_to_the_end(client, home, content="Can I bring my dog to the kayak offsite?")
    [final] = [e for e in _sse(client.get(f"/v1/runs/{run_id}/events", headers=home.headers()).text)
               if e["type"] == "final"]
    assert final["data"]["refused"] and final["data"]["outcome"] == "refused", final
    assert client.get(f"/v1/runs/{run_id}", headers=home.headers()).json()["outcome"] == "refused"


def test_a_final_event_recorded_before_answers_carried_an_outcome_gets_one_derived():
    from citadel.state.runs import EventType, RunEvent
    from serving.services.runs import _public_event

    old = {"key": "final", "answer": "The documents I can see don't state it. The closest is: '…' [1]",
           "refused": True, "reason": "not_confirmed", "citations": [{"document_id": "travel"}]}
    public = _public_event(RunEvent("r", 9, EventType.FINAL, old, 0.0))
    assert public["data"]["outcome"] == "not_confirmed" and "key" not in public["data"]
    assert "outcome" not in old  # the stored event is left as it was
    progress = _public_event(RunEvent("r", 1, EventType.PROGRESS, {"key": "route", "stage": "route"}, 0.0))
    assert "outcome" not in progress["data"]


def test_another_users_conversation_and_run_are_404(client, home):
    conversation, run_id, _ = _run_to_the_end(client, home)
    bob = home.headers(user="bob")
    assert client.get(f"/v1/runs/{run_id}", headers=bob).status_code == 404
    assert client.get(f"/v1/runs/{run_id}/events", headers=bob).status_code == 404
    assert client.post(f"/v1/runs/{run_id}:cancel", headers=bob).status_code == 404
    assert client.post(f"/v1/conversations/{conversation}/messages", json={"content": "hi"},
                       headers=bob).status_code == 404
    assert client.delete(f"/v1/conversations/{conversation}", headers=bob).status_code == 404
    assert client.post(f"/v1/answers/{run_id}/feedback", json={"vote": "down"}, headers=bob).status_code == 404
    assert client.get("/v1/runs/no-such-run", headers=home.headers()).status_code == 404


def test_bad_messages_get_clear_errors(client, home):
    conversation = client.post("/v1/conversations", headers=home.headers()).json()["conversation_id"]
    limit = home.config.agent.max_message_chars
    too_long = client.post(f"/v1/conversations/{conversation}/messages", json={"content": "x" * (limit + 1)},
                           headers=home.headers())
    assert too_long.status_code == 413 and too_long.json()["error"]["code"] == "payload_too_large"
    empty = client.post(f"/v1/conversations/{conversation}/messages", json={"content": "  "}, headers=home.headers())
    assert empty.status_code == 422
    assert client.post(f"/v1/conversations/{conversation}/messages", json={},
                       headers=home.headers()).status_code == 422


def test_feedback_is_stored_with_the_cited_versions(client, home):
    _, run_id, events = _run_to_the_end(client, home)
    cited = [{"document_id": c["document_id"], "version": c["version"]} for c in events[-1]["data"]["citations"]]
    response = client.post(f"/v1/answers/{run_id}/feedback", json={"vote": "down", "reason": "outdated",
                                                                   "comment": "the limit changed"},
                           headers=home.headers())
    assert response.status_code == 200, response.text
    assert response.json()["sources"] == cited
    [row] = client.app.state.services.wiring.catalog.feedback("acme")
    assert row["answer_id"] == run_id and row["sources"] == cited and row["reason"] == "outdated"
    bad = client.post(f"/v1/answers/{run_id}/feedback", json={"vote": "sideways"}, headers=home.headers())
    assert bad.status_code == 422


def test_deleting_a_conversation_deletes_it_and_its_messages(client, home):
    conversation, _, _ = _run_to_the_end(client, home)
    store = client.app.state.services.wiring.conversation_store
    assert len(store.messages(conversation)) == 2  # the question and the assistant's answer
    assert client.delete(f"/v1/conversations/{conversation}", headers=home.headers()).status_code == 200
    assert store.get(conversation) is None and store.messages(conversation) == []
    assert client.post(f"/v1/conversations/{conversation}/messages", json={"content": QUESTION},
                       headers=home.headers()).status_code == 404


def test_cancel_is_accepted_for_the_owner(client, home):
    _, run_id, _ = _run_to_the_end(client, home)
    response = client.post(f"/v1/runs/{run_id}:cancel", headers=home.headers())
    assert response.status_code == 200 and response.json()["cancel_requested"] is True


def test_finished_runs_are_counted_by_path_and_stop_reason(client, home):
    _run_to_the_end(client, home)
    text = client.get("/metrics", headers=home.metrics_headers()).text
    assert 'citadel_runs_total{path="' in text and 'status="succeeded"' in text
    assert "citadel_run_steps_count 1.0" in text and "citadel_run_seconds_count 1.0" in text


def test_replay_over_http_on_redis_streams(tmp_path, redis_url):
    """The same replay with the run log in Redis Streams (`state.redis_url` set): disconnect after
    event 4, reconnect with after_seq=4, receive 5 to final once."""
    import uuid

    from tests.integration.conftest import make_home

    home = make_home(tmp_path / "home", CITADEL_STATE__REDIS_URL=redis_url,
                     CITADEL_STATE__KEY_PREFIX=f'"runs-test-{uuid.uuid4().hex[:8]}:"')
    with client_for(home) as client:
        assert client.app.state.services.wiring.run_store.__class__.__name__ == "RedisRunStore"
        _, run_id, events = _run_to_the_end(client, home)
        assert len(events) > 5 and events[-1]["type"] == "final"
        replay = client.get(f"/v1/runs/{run_id}/events?after_seq=4", headers=home.headers())
        assert _sse(replay.text) == events[4:]
        client.app.state.services.runs.wait_for_runs(60)


def _message(client, home, conversation: str, content: str) -> list[dict]:
    posted = client.post(f"/v1/conversations/{conversation}/messages", json={"content": content},
                         headers=home.headers())
    assert posted.status_code == 202, posted.text
    client.app.state.services.runs.wait_for_runs(60)
    return client.get(f"/v1/runs/{posted.json()['run_id']}/events",
                      headers={**home.headers(), "accept": "application/json"}).json()


MULTI_PART = "How long must passwords be and who approves expense reports?"


@pytest.mark.parametrize("revoke", [False, True])
def test_the_next_turns_prompt_leaves_out_an_answer_whose_source_was_revoked(client, home, revoke):
    conversation = client.post("/v1/conversations", headers=home.headers()).json()["conversation_id"]
    first = _message(client, home, conversation, QUESTION)
    [final] = [e["data"] for e in first if e["type"] == "final"]
    assert {c["document_id"] for c in final["citations"]} == {"travel-policy"}
    if revoke:  # alice (staff) can no longer read the policy her first answer came from
        acl = client.put("/v1/admin/tenants/acme/documents/travel-policy/acl", json={"groups": ["exec"]},
                         headers=home.admin_headers())
        assert acl.status_code == 200, acl.text
    second = _message(client, home, conversation, MULTI_PART)
    [prompt] = [e["data"] for e in second if e["type"] == "progress" and e["data"]["stage"] == "prompt"]
    kept = prompt["parts"]["conversation"]["kept"]
    # the first turn's question (the user's own words) stays; its answer only while its source is readable
    assert kept == (["turn 1"] if revoke else ["turn 1", "turn 2"])
    assert prompt["tokens"] <= prompt["max_tokens"] and prompt["parts"]["sources"]["kept"]
    messages = client.app.state.services.runs.conversations.messages(conversation)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]  # each turn recorded once


def test_a_message_beyond_the_replicas_run_bound_is_refused_and_leaves_no_run(client, home):
    """Past `serving.admission_max_runs` unfinished runs a message is a 503 Overloaded with Retry-After,
    refused before anything is charged or recorded; a finished run makes room again."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from citadel.errors import Overloaded
    from serving.services.runs import RunsService

    services = client.app.state.services
    release, driven = threading.Event(), []

    def drive(run_id, owner):  # a run that works until released
        driven.append(run_id)
        release.wait(30)
        return services.runs.runs.get(run_id)

    bounded = RunsService(services.config.agent, services.runs.runs, services.runs.memory, services.runs.catalog,
                          drive, ThreadPoolExecutor(1), services.metrics, max_runs=1, retry_after_s=2)
    headers = home.headers()
    caller = services.access.caller(headers["authorization"], headers["x-citadel-user-context"])
    conversation = bounded.create_conversation(caller)["conversation_id"]
    first = bounded.post_message(caller, conversation, QUESTION)["run_id"]
    orphans = set(services.runs.runs.orphans())
    with pytest.raises(Overloaded) as refused:
        bounded.post_message(caller, conversation, "And in Paris?")
    assert refused.value.http_status == 503 and refused.value.retry_after_s == 2
    assert set(services.runs.runs.orphans()) == orphans and first in orphans  # no second run recorded
    assert bounded.adopt_orphans() == []  # adoption respects the bound too
    release.set()
    bounded.wait_for_runs(10)
    assert driven == [first]
    assert bounded.post_message(caller, conversation, "And in Paris?")["run_id"] != first  # room again
    bounded.wait_for_runs(10)
