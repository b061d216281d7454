"""The runs family's request and response bodies."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, Field

from serving.http.protocol import RequestBody, ResponseBody


class MessageRequest(RequestBody):
    # Its length is checked by the runs service against `agent.max_message_chars` (413, not 422).
    content: str = Field(..., description="The user's message; it starts a run.")


class FeedbackRequest(RequestBody):
    vote: Literal["up", "down"]
    reason: Optional[Literal["wrong_source", "incomplete", "outdated", "other"]] = None
    comment: str = Field("", description="Free text (at most 2,000 characters).")


class ConversationCreated(ResponseBody):
    conversation_id: str


class ConversationDeleted(ResponseBody):
    conversation_id: str
    deleted: bool = Field(..., description="True: the conversation and everything derived from it are gone.")


class DeletedCounts(BaseModel):
    conversations: int
    memories: int
    runs: int


class UserDataDeleted(ResponseBody):
    tenant_id: str
    user_id: str
    deleted: DeletedCounts


class RunStarted(ResponseBody):
    run_id: str = Field(..., description="Follow it at /v1/runs/{run_id}/events.")


class RunStep(BaseModel):
    id: str
    status: str


class RunState(ResponseBody):
    run_id: str
    conversation_id: str
    status: str = Field(..., description="queued | running | waiting | succeeded | failed | cancelled.")
    path: Optional[str] = Field(..., description="single_shot or agentic, once routed.")
    stop_reason: Optional[str]
    created_at: float
    updated_at: float
    outcome: Optional[str] = Field(..., description="The answer's outcome (answered | not_confirmed | refused); "
                                   "null before it answers.")
    steps: list[RunStep] = Field(..., description="The recorded steps, without their results' bodies.")


class CancelRequested(ResponseBody):
    run_id: str
    status: str = Field(..., description="The run's status when the cancel was asked for.")
    cancel_requested: bool


class RunEventBody(ResponseBody):
    seq: int = Field(..., description="The event's place in the run's log (the stream's `id:`).")
    type: str = Field(..., description="progress | token | citation | final | error (and approval or review "
                                       "events); `final` is authoritative.")
    data: dict[str, Any]


class FeedbackSource(BaseModel):
    document_id: str
    version: int


class FeedbackRecorded(ResponseBody):
    feedback_id: int
    answer_id: str
    sources: list[FeedbackSource] = Field(..., description="The document versions the answer cited.")


EVENT_STREAM = {200: {"description": "The events as Server-Sent Events, or with `Accept: application/json` "
                                     "the events so far as a JSON list.",
                      "content": {"text/event-stream": {"schema": {"type": "string"}}}}}
