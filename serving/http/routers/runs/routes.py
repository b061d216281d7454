"""Conversations and runs (DESIGN.md §10): a message starts a run; its events replay from any seq."""

from __future__ import annotations

import asyncio
import json
from typing import Optional, Union

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from serving.http.deps import AsCaller, ServicesDep
from serving.http.protocol import ERRORS
from serving.http.routers.runs.protocol import (EVENT_STREAM, CancelRequested, ConversationCreated,
                                                ConversationDeleted, FeedbackRecorded, FeedbackRequest,
                                                MessageRequest, RunEventBody, RunStarted, RunState, UserDataDeleted)
from serving.services.access import Caller
from serving.services.compose import Services
from serving.services.runs import is_terminal

router = APIRouter(responses=ERRORS)


@router.post("/v1/conversations", status_code=201)
async def create_conversation(services: ServicesDep, work: AsCaller) -> ConversationCreated:
    return ConversationCreated.model_validate(await work("conversations", services.runs.create_conversation))


@router.delete("/v1/conversations/{conversation_id}")
async def delete_conversation(conversation_id: str, services: ServicesDep, work: AsCaller) -> ConversationDeleted:
    result = await work("conversations", services.runs.delete_conversation, conversation_id)
    return ConversationDeleted.model_validate(result)


@router.delete("/v1/me/data")
async def delete_my_data(services: ServicesDep, work: AsCaller) -> UserDataDeleted:
    """Delete all of the calling user's conversations, memories, runs and run events (audited)."""
    return UserDataDeleted.model_validate(await work("me", services.runs.delete_my_data))


@router.post("/v1/conversations/{conversation_id}/messages", status_code=202)
async def post_message(conversation_id: str, body: MessageRequest, services: ServicesDep,
                       work: AsCaller) -> RunStarted:
    result = await work("messages", services.runs.post_message, conversation_id, body.content)
    return RunStarted.model_validate(result)


@router.get("/v1/runs/{run_id}")
async def get_run(run_id: str, services: ServicesDep, work: AsCaller) -> RunState:
    return RunState.model_validate(await work("runs", services.runs.run, run_id))


@router.post("/v1/runs/{run_id}:cancel")
async def cancel_run(run_id: str, services: ServicesDep, work: AsCaller) -> CancelRequested:
    return CancelRequested.model_validate(await work("runs", services.runs.cancel, run_id))


@router.get("/v1/runs/{run_id}/events", response_model=list[RunEventBody], responses=EVENT_STREAM)
async def run_events(request: Request, run_id: str, services: ServicesDep, work: AsCaller,
                     after_seq: int = Query(0, ge=0),
                     last_event_id: Optional[str] = Header(None)) -> Union[list[RunEventBody], StreamingResponse]:
    """Server-Sent Events (`id:` = seq; `Last-Event-ID` honoured) until the final or error event;
    with `Accept: application/json`, the events so far as a list. `final` is authoritative."""
    after = max(after_seq, seq_of(last_event_id))
    events = await work("events", services.runs.events, run_id, after)  # 404 first
    if "application/json" in request.headers.get("accept", ""):
        return [RunEventBody.model_validate(event) for event in events]
    stream = event_stream(request, services, work.caller, run_id, after, events)
    return StreamingResponse(stream, media_type="text/event-stream",
                             headers={"cache-control": "no-store", "x-accel-buffering": "no"})


@router.post("/v1/answers/{answer_id}/feedback")
async def feedback(answer_id: str, body: FeedbackRequest, services: ServicesDep, work: AsCaller) -> FeedbackRecorded:
    result = await work("feedback", services.runs.feedback, answer_id, body.vote, body.reason, body.comment)
    return FeedbackRecorded.model_validate(result)


def seq_of(last_event_id: Optional[str]) -> int:
    """A reconnecting client's `Last-Event-ID` (a seq we sent); anything else counts as none."""
    value = (last_event_id or "").strip()
    return int(value) if value.isdigit() and len(value) <= 12 else 0


async def event_stream(request: Request, services: Services, caller: Caller, run_id: str, after: int,
                       events: list[dict]):
    """Every event after `after`, once, in order — `events` first (already read), then as they are
    recorded — ending with the run's final or error event; a comment line keeps an idle connection
    open, and a departed client ends the loop."""
    while True:
        if not events:
            events = await asyncio.to_thread(services.runs.wait_events, caller, run_id, after)
        if not events:
            if await request.is_disconnected():
                return
            yield ": keep-alive\n\n"
            continue
        for event in events:
            after = event["seq"]
            yield f"id: {event['seq']}\nevent: {event['type']}\ndata: {json.dumps(event)}\n\n"
        if any(is_terminal(e) for e in events):
            return
        events = []
