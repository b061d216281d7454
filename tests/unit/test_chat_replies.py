"""A run's events as the OpenAI door's reply (serving/services/chat.py): which event ends the reply and
what it says — the final answer, a held answer, a parked approval — and that an error event fails the
request with the run's code, never its details; the question is the last message, the user's."""

from __future__ import annotations

import pytest

from citadel.errors import InternalError, InvalidRequest, NotFound
from serving.services.chat import AGENT, ChatService, event_reply, message_text

STARTED = {"run_id": "r1", "conversation_id": "c1"}
CITATION = {"chunk_id": "acme:travel:v3:0001", "document_id": "travel", "url": "/v1/documents/travel/versions/3/sections/x"}


def test_the_final_event_is_the_answer_with_its_citations_and_run():
    reply = event_reply({"seq": 9, "type": "final", "data": {
        "answer": "220 USD [1].", "outcome": "answered", "refused": False, "reason": None, "citations": [CITATION],
        "degraded": [], "bundle_id": "b-1", "stop_reason": None}}, STARTED, "req")
    assert reply.content == "220 USD [1]." and reply.finish_reason == "stop" and reply.citations == [CITATION]
    assert reply.citadel["outcome"] == "answered" and reply.citadel["run_id"] == "r1"
    assert reply.citadel["conversation_id"] == "c1" and reply.citadel["request_id"] == "req"


def test_a_held_answer_and_a_parked_approval_end_the_reply_as_messages():
    held = event_reply({"seq": 4, "type": "review_pending", "data": {
        "status": "review_pending", "review_id": "rv1", "reason": "conflict_undated", "message": "Held for review.",
        "reviewers": "finance-ops", "expire_at": None, "step_id": "s1"}}, STARTED, "req")
    assert held.finish_reason == "content_filter" and held.content == "Held for review." and held.citations == []
    assert held.citadel["outcome"] == "review_pending" and held.citadel["review_id"] == "rv1"
    parked = event_reply({"seq": 5, "type": "approval_required", "data": {
        "approval_id": "ap1", "step_id": "s2", "tool": "crm.update", "arguments": {}, "approver_group": "sales-leads",
        "expire_at": None}}, STARTED, "req")
    assert parked.finish_reason == "stop" and parked.citadel["outcome"] == "approval_required"
    assert parked.citadel["approval_id"] == "ap1" and "sales-leads" in parked.content and "ap1" in parked.content


def test_events_along_the_way_end_nothing_and_an_error_fails_the_request():
    for kind in ("progress", "token", "citation"):
        assert event_reply({"seq": 1, "type": kind, "data": {"text": "x"}}, STARTED, "req") is None
    with pytest.raises(InternalError, match="planner_unavailable"):
        event_reply({"seq": 2, "type": "error", "data": {"code": "planner_unavailable", "message": "no planner"}},
                    STARTED, "req")


def test_the_question_is_the_last_message_the_users():
    chat = ChatService(None, None, max_question_chars=20)
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "first"},
             {"role": "assistant", "content": "reply"}, {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                                     {"type": "text", "text": "b"}]}]
    assert chat.question_of("citadel", turns) == "ab"
    with pytest.raises(InvalidRequest, match="last message"):
        chat.question_of("citadel", turns[:3])
    with pytest.raises(InvalidRequest, match="20"):
        chat.question_of("citadel", [{"role": "user", "content": "x" * 21}])
    assert chat.question_of(AGENT, [{"role": "user", "content": "x" * 21}]) == "x" * 21  # the run bounds its own
    with pytest.raises(NotFound):
        chat.question_of("gpt-4o", turns)
    assert message_text(None) == ""
