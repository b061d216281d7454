"""`POST /v1/chat/completions` and `GET /v1/models`: the caller verified by the admission middleware as
on every /v1/ route (the service bearer as the SDK's `api_key`, the user context as a default header),
then the chat service on the worker threads. Errors come in OpenAI's shape (serving/http/errors.py).

A stream opens only once its answer (`citadel`) or its run (`citadel-agent`) has started, so a refusal
before any work — a budget, a bad request, an unknown conversation — is an HTTP status, not a chunk. A
single-shot answer is streamed in pieces of a few words as soon as it exists; a run's token events are
streamed as they are recorded."""

from __future__ import annotations

import asyncio
import json
import time
from typing import AsyncIterator, Optional, Union

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response, StreamingResponse

from citadel.agent.delivery import token_pieces
from citadel.errors import CitadelError
from serving.http.deps import AsCaller, CallerDep, Ids, ServicesDep
from serving.http.errors import openai_error_body
from serving.http.protocol import ERRORS
from serving.http.routers.openai.protocol import (CHUNK_STREAM, AssistantMessage, ChatCompletion,
                                                  ChatCompletionChunk, ChatCompletionRequest, ChatCitation, Choice,
                                                  ChunkChoice, CitadelReply, Delta, MAX_MODEL_CHARS, Model,
                                                  ModelList)
from serving.http.routers.query.protocol import MAX_QUESTION_CHARS
from serving.services.access import Caller
from serving.services.chat import SINGLE_SHOT, ChatReply, ChatService, event_reply
from serving.services.compose import Services

router = APIRouter(responses=ERRORS)
DONE = "data: [DONE]\n\n"
KEEP_ALIVE = ": keep-alive\n\n"


def chat_service(services: Services) -> ChatService:
    return ChatService(services.query, services.runs, MAX_QUESTION_CHARS)


@router.get("/v1/models")
async def list_models(caller: CallerDep) -> ModelList:
    """The answer paths, as OpenAI models."""
    return ModelList(data=[Model(id=name, description=text) for name, text in ChatService.models().items()])


@router.get("/v1/models/{model}")
async def get_model(caller: CallerDep, model: str = Path(..., max_length=MAX_MODEL_CHARS)) -> Model:
    ChatService.check_model(model)
    return Model(id=model, description=ChatService.models()[model])


@router.post("/v1/chat/completions", response_model=ChatCompletion, responses=CHUNK_STREAM)
async def chat_completions(request: Request, body: ChatCompletionRequest, services: ServicesDep, work: AsCaller,
                           ids: Ids) -> Union[ChatCompletion, Response]:
    """The last user message answered on the path `model` names, as an assistant message with its
    citations; `stream: true` for OpenAI's chunks. Refusals and held answers are ordinary replies
    (`finish_reason`, `citadel.outcome`)."""
    chat = chat_service(services)
    question = chat.question_of(body.model, [m.model_dump() for m in body.messages])
    envelope = Envelope(f"chatcmpl-{ids.request_id}", int(time.time()), body.model)
    if body.model == SINGLE_SHOT:
        reply = await work("chat", chat.answer, question, ids.request_id, ids.correlation_id)
        return streamed(envelope.reply_chunks(reply)) if body.stream else as_json(envelope.completion(reply))
    conversation_id = body.citadel.conversation_id if body.citadel else None
    if not body.stream:
        return as_json(envelope.completion(await work("chat", chat.run, question, conversation_id, ids.request_id)))
    started = await work("chat", chat.start_run, question, conversation_id)
    return streamed(run_chunks(request, chat, work.caller, started, ids.request_id, envelope))


def as_json(completion: ChatCompletion) -> Response:
    """The completion, validated when it was built, serialised once (FastAPI would dump, validate and
    dump it again for the response model, which stays the OpenAPI document's description)."""
    return Response(completion.model_dump_json(), media_type="application/json")


class Envelope:
    """OpenAI's envelope of one completion: its id, creation time and model, on every chunk."""

    def __init__(self, completion_id: str, created: int, model: str):
        self.id, self.created, self.model = completion_id, created, model

    def completion(self, reply: ChatReply) -> ChatCompletion:
        choice = Choice(message=AssistantMessage(content=reply.content), finish_reason=reply.finish_reason,
                        citations=numbered(reply.citations))
        return ChatCompletion(id=self.id, created=self.created, model=self.model, choices=[choice],
                              system_fingerprint=reply.citadel.get("bundle_id"),
                              citadel=CitadelReply.model_validate(reply.citadel))

    def chunk(self, delta: Delta, reply: Optional[ChatReply] = None) -> str:
        """One `data:` line; the last one (`reply`) carries the finish reason, citations and `citadel`."""
        choice = ChunkChoice(delta=delta) if reply is None else ChunkChoice(
            delta=delta, finish_reason=reply.finish_reason, citations=numbered(reply.citations))
        chunk = ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=[choice],
                                    citadel=None if reply is None else CitadelReply.model_validate(reply.citadel))
        return f"data: {chunk.model_dump_json(exclude_none=True)}\n\n"

    def opening(self) -> str:
        return self.chunk(Delta(role="assistant", content=""))

    def text(self, piece: str) -> str:
        return self.chunk(Delta(content=piece))

    def closing(self, reply: ChatReply) -> str:
        return self.chunk(Delta(), reply)

    def reply_chunks(self, reply: ChatReply) -> list[str]:
        """A reply that exists whole: the opening chunk, its text in pieces of a few words, the closing one."""
        return [self.opening(), *(self.text(piece) for piece in token_pieces(reply.content)), self.closing(reply), DONE]


def numbered(citations: list[dict]) -> list[ChatCitation]:
    return [ChatCitation.model_validate({**citation, "number": number})
            for number, citation in enumerate(citations, start=1)]


def streamed(chunks) -> StreamingResponse:
    return StreamingResponse(aiter_of(chunks) if isinstance(chunks, list) else chunks,
                             media_type="text/event-stream",
                             headers={"cache-control": "no-store", "x-accel-buffering": "no"})


async def aiter_of(chunks: list[str]) -> AsyncIterator[str]:
    for chunk in chunks:
        yield chunk


async def run_chunks(request: Request, chat: ChatService, caller: Caller, started: dict[str, str], request_id: str,
                     envelope: Envelope) -> AsyncIterator[str]:
    """A run's reply as it is recorded: its token events as text, then the event that ends the reply
    (a held answer's or an approval's message is sent as text first, having had no tokens). An error
    event is OpenAI's in-stream error object; a departed client ends the loop (the run goes on)."""
    yield envelope.opening()
    after = 0
    while True:
        events = await asyncio.to_thread(chat.run_events, caller, started["run_id"], after)
        if not events:
            if await request.is_disconnected():
                return
            yield KEEP_ALIVE
            continue
        for event in events:
            after = event["seq"]
            if event["type"] == "token":
                yield envelope.text(event["data"]["text"])
                continue
            try:
                reply = event_reply(event, started, request_id)
            except CitadelError as error:  # the run's error event
                error_body = openai_error_body(error.code, error.message, request_id, error.http_status)
                yield f"data: {json.dumps(error_body)}\n\n"
                yield DONE
                return
            if reply is None:
                continue
            if event["type"] != "final":
                yield envelope.text(reply.content)
            yield envelope.closing(reply)
            yield DONE
            return
