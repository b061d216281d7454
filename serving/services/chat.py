"""The OpenAI-compatible chat door (DESIGN.md §12): a chat's messages in, one of Citadel's answers out as
an assistant reply. Plain Python over the query and runs services, never around them: the `citadel`
model is `QueryService.answer` (the /v1/answer path: budgets, guardrails, the ACL-scoped cache, tracing,
the live ACL check, reviews), `citadel-agent` is a run started by `RunsService.post_message` whose events
become the reply.

Only the last message is asked. Earlier turns, and any system message, are ignored: they are the
client's text, and a turn the client says the assistant wrote cannot be checked against what was said
nor against what the user may read now, so it cannot be the conversation context a run's memory is
(citadel/agent/memory.py uses a past answer only while its sources are readable at the same version).
A client that wants that context continues its own conversation on the agent path (`conversation_id`).

The OpenAI envelope (ids, chunks, `[DONE]`) is the HTTP family's (serving/http/routers/openai/); this
module turns an answer, a held answer or a run's events into a `ChatReply`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from citadel.errors import InternalError, InvalidRequest, NotFound
from citadel.guardrails.router import PROMPT_INJECTION, SENSITIVE_DATA
from citadel.resilience.deadline import check_deadline, time_left
from citadel.reviews.tasks import REVIEW_PENDING
from citadel.state.runs import EventType
from serving.services.access import Caller
from serving.services.query import QueryService
from serving.services.runs import EVENT_WAIT_S, RunsService

SINGLE_SHOT = "citadel"
AGENT = "citadel-agent"
MODELS = {SINGLE_SHOT: "A cited answer on the single-shot path (POST /v1/answer).",
          AGENT: "An agentic run (POST /v1/conversations/{id}/messages); its final event is the reply."}
USER = "user"
APPROVAL_REQUIRED = "approval_required"
# OpenAI's finish reasons: `stop` for every reply Citadel gives (an answer, a not-confirmed reply, a
# refusal: each is the honest reply); `content_filter` when what was asked is withheld: a guardrail
# refused to process it, or a person must review the answer first.
STOP = "stop"
CONTENT_FILTER = "content_filter"
WITHHELD_REASONS = frozenset({SENSITIVE_DATA, PROMPT_INJECTION})
# Run events that end a reply: the answer, a failure, or the run parking on a person.
CLOSING_EVENTS = frozenset({EventType.FINAL, EventType.ERROR, EventType.REVIEW_PENDING, EventType.APPROVAL_REQUIRED})


@dataclass(frozen=True)
class ChatReply:
    """One assistant reply: its text (with the `[n]` markers), the citations those markers number (`[n]`
    is `citations[n-1]`), OpenAI's finish reason, and Citadel's own account of it (`citadel`)."""

    content: str
    finish_reason: str
    citadel: dict[str, Any]
    citations: list[dict[str, Any]] = field(default_factory=list)


class ChatService:
    def __init__(self, query: QueryService, runs: RunsService, max_question_chars: int):
        """`max_question_chars`: the longest question the single-shot path takes (/v1/answer's bound)."""
        self.query = query
        self.runs = runs
        self.max_question_chars = max_question_chars

    @staticmethod
    def models() -> dict[str, str]:
        return dict(MODELS)

    @staticmethod
    def check_model(model: str) -> None:
        if model not in MODELS:
            raise NotFound(f"no model {model[:64]!r}; the models are {', '.join(MODELS)}", code="model_not_found")

    def question_of(self, model: str, messages: list[dict[str, Any]]) -> str:
        """The question: the last message, which must be the user's, as text."""
        self.check_model(model)
        if not messages or messages[-1]["role"] != USER:
            raise InvalidRequest("messages: the last message must be the user's (role 'user'): it is the question")
        question = message_text(messages[-1]["content"])
        if model == SINGLE_SHOT and len(question) > self.max_question_chars:
            raise InvalidRequest(f"messages: the question holds at most {self.max_question_chars:,} characters "
                                 f"on the {SINGLE_SHOT} model")
        return question  # the agent path bounds its own (RunsService.post_message: 413)

    # ------------------------------------------------------------------ citadel: single shot
    def answer(self, caller: Caller, question: str, request_id: str, correlation_id: str | None = None) -> ChatReply:
        """The /v1/answer path's reply, through the same service method."""
        body = self.query.answer(caller, question, request_id, correlation_id)
        if body.get("status") == REVIEW_PENDING:
            return held_reply(body, request_id)
        return answer_reply(body, request_id, cached=body.get("cached", False))

    # ------------------------------------------------------------------ citadel-agent: a run
    def start_run(self, caller: Caller, question: str, conversation_id: Optional[str]) -> dict[str, str]:
        """A run answering `question` in the caller's own conversation (a new one when none is named)."""
        if conversation_id is None:
            conversation_id = self.runs.create_conversation(caller)["conversation_id"]
        started = self.runs.post_message(caller, conversation_id, question)
        return {"conversation_id": conversation_id, "run_id": started["run_id"]}

    def run_events(self, caller: Caller, run_id: str, after_seq: int) -> list[dict]:
        """The run's events after `after_seq`, waiting a while for the next (empty: none came)."""
        return self.runs.wait_events(caller, run_id, after_seq, time_left(EVENT_WAIT_S))

    def run(self, caller: Caller, question: str, conversation_id: Optional[str], request_id: str) -> ChatReply:
        """A run started and waited for: the reply its closing event makes."""
        return self.run_reply(caller, self.start_run(caller, question, conversation_id), request_id)

    def run_reply(self, caller: Caller, started: dict[str, str], request_id: str) -> ChatReply:
        """Wait, within the request's deadline (504 past it; the run goes on and its events stay
        readable at /v1/runs/{run_id}/events), for the event that ends the reply: the reply."""
        after = 0
        while True:
            check_deadline()
            for event in self.run_events(caller, started["run_id"], after):
                after = event["seq"]
                reply = event_reply(event, started, request_id)
                if reply is not None:
                    return reply


def message_text(content: str | Iterable[dict[str, Any]] | None) -> str:
    """A message's text: a string, or its text parts joined (the protocol admits no other part)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part["text"] for part in content)


def answer_reply(body: dict[str, Any], request_id: str, **extra: Any) -> ChatReply:
    """An answer's body (/v1/answer's, or a run's final event) as a reply."""
    reason = body.get("reason")
    return ChatReply(body["answer"], CONTENT_FILTER if reason in WITHHELD_REASONS else STOP,
                     {"outcome": body["outcome"], "reason": reason, "request_id": request_id,
                      "bundle_id": body.get("bundle_id"), "degraded": list(body.get("degraded", [])), **extra},
                     list(body.get("citations", [])))


def held_reply(body: dict[str, Any], request_id: str, **extra: Any) -> ChatReply:
    """An answer held for a person's review: its message (nothing of the held answer) and the task."""
    return ChatReply(body["message"], CONTENT_FILTER,
                     {"outcome": REVIEW_PENDING, "reason": body.get("reason"), "request_id": request_id,
                      "review_id": body["review_id"], "reviewers": body.get("reviewers"), **extra})


def event_reply(event: dict[str, Any], started: dict[str, str], request_id: str) -> ChatReply | None:
    """The reply a run's event ends with; None for the events along the way. An error event fails the
    request (its code and message, never more)."""
    kind, data = event["type"], event["data"]
    if kind == EventType.FINAL:
        return answer_reply(data, request_id, stop_reason=data.get("stop_reason"), **started)
    if kind == EventType.REVIEW_PENDING:
        return held_reply(data, request_id, **started)
    if kind == EventType.APPROVAL_REQUIRED:
        return ChatReply(approval_message(data), STOP,
                         {"outcome": APPROVAL_REQUIRED, "reason": None, "request_id": request_id,
                          "approval_id": data["approval_id"], "reviewers": data.get("approver_group"), **started})
    if kind == EventType.ERROR:
        raise InternalError(f"the run failed ({data.get('code') or 'internal_error'}): "
                            f"{data.get('message') or 'see the run events'}")
    return None


def approval_message(data: dict[str, Any]) -> str:
    return (f"The run waits for {data.get('approver_group') or 'a person'} to approve {data.get('tool')!s}; "
            f"it continues once they decide (approval {data['approval_id']}).")
