"""The OpenAI family's request and response bodies: OpenAI's chat-completion, chunk and model shapes
(the fields the openai SDK reads), with Citadel's additions beside them — `citations` on each choice and
`citadel` on the completion. Request fields OpenAI defines and Citadel has no use for (temperature,
tools, `user`, …) are ignored, like any unknown field: identity comes from the signed user context."""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, Field

from serving.http.protocol import RequestBody, ResponseBody
from serving.http.routers.query.protocol import Citation

MAX_MESSAGES = 256
MAX_MODEL_CHARS = 64
MAX_CONTENT_PARTS = 32
# A message's text, far above any question (the body limit, serving.max_body_bytes, is lower still):
# each path bounds its question itself (citadel: 2,000 characters; citadel-agent: agent.max_message_chars).
MAX_CONTENT_CHARS = 100_000
ROLES = Literal["system", "developer", "user", "assistant", "tool", "function"]


class TextPart(RequestBody):
    type: Literal["text"] = Field(..., description="Only text parts: Citadel answers from documents, not images.")
    text: str = Field(..., max_length=MAX_CONTENT_CHARS)


class ChatMessage(RequestBody):
    role: ROLES
    content: Union[Annotated[str, Field(max_length=MAX_CONTENT_CHARS)],
                   Annotated[list[TextPart], Field(max_length=MAX_CONTENT_PARTS)], None] = Field(
        None, description="A string or text parts. Only the last message (the user's) is asked; earlier turns "
                          "and system messages are ignored (docs/http-api.md#openai-compatible-chat).")
    name: Optional[str] = Field(None, max_length=MAX_MODEL_CHARS)


class ChatExtension(RequestBody):
    conversation_id: Optional[str] = Field(
        None, max_length=128, description="citadel-agent: continue this conversation of the caller's (its memory "
                                          "is the run's context); none: a new one, named in the reply.")


class StreamOptions(RequestBody):
    include_usage: bool = False


class ChatCompletionRequest(RequestBody):
    model: str = Field(..., min_length=1, max_length=MAX_MODEL_CHARS,
                       description="citadel: the single-shot answer path | citadel-agent: an agentic run.")
    messages: list[ChatMessage] = Field(..., min_length=1, max_length=MAX_MESSAGES)
    stream: Optional[bool] = Field(False, description="Server-sent `chat.completion.chunk`s ending in `data: [DONE]`.")
    stream_options: Optional[StreamOptions] = None
    n: Optional[int] = Field(1, ge=1, le=1, description="One choice: Citadel gives one answer.")
    citadel: Optional[ChatExtension] = None


class ChatCitation(Citation):
    number: int = Field(..., description="The `[n]` marker in the text that cites it.")


class CitadelReply(BaseModel):
    """What Citadel says about the reply, beside OpenAI's fields."""

    outcome: Literal["answered", "not_confirmed", "refused", "review_pending", "approval_required"] = Field(
        ..., description="As on /v1/answer, plus review_pending (a person reviews the answer first; ask again once "
                         "reviewed) and approval_required (a run waits on a person's approval).")
    reason: Optional[str] = None
    request_id: str
    bundle_id: Optional[str] = None
    review_id: Optional[str] = None
    approval_id: Optional[str] = None
    reviewers: Optional[str] = None
    cached: Optional[bool] = None
    degraded: list[str] = []
    run_id: Optional[str] = Field(None, description="citadel-agent: the run (its events at /v1/runs/{run_id}/events).")
    conversation_id: Optional[str] = None
    stop_reason: Optional[str] = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str
    refusal: Optional[str] = Field(None, description="Always null: a refusal is an ordinary message "
                                                     "(`citadel.outcome` says so).")


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop", "content_filter"]
    logprobs: None = None
    citations: list[ChatCitation]


class ChatCompletion(ResponseBody):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: None = None
    system_fingerprint: Optional[str] = Field(None, description="The config bundle that shaped the answer.")
    citadel: CitadelReply


class Delta(BaseModel):
    role: Optional[Literal["assistant"]] = None
    content: Optional[str] = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: Optional[Literal["stop", "content_filter"]] = None
    citations: Optional[list[ChatCitation]] = Field(None, description="On the last chunk.")


class ChatCompletionChunk(ResponseBody):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    citadel: Optional[CitadelReply] = Field(None, description="On the last chunk.")


class Model(ResponseBody):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "citadel"
    description: str


class ModelList(ResponseBody):
    object: Literal["list"] = "list"
    data: list[Model]


CHUNK_STREAM = {200: {"description": "A `chat.completion`, or with `stream: true` Server-Sent Events: "
                                     "`data: <chat.completion.chunk>` lines, then `data: [DONE]`.",
                      "content": {"text/event-stream": {"schema": {"type": "string"}}}}}
