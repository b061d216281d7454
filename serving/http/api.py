"""The HTTP API (DESIGN.md §9): FastAPI routes over the serving services, one JSON error shape.

The app is built once per process and served either by Ray Serve (serving/ray/app.py wraps it with
`serve.ingress`) or by any ASGI server / TestClient. Routes find their services on
`app.state.services` or, inside a Serve replica, the ones the replica installed with
`install_services` (one set per process).

This is the edge: each request's deadline (`serving.request_timeout_s`) is opened here as a
`deadline_scope`, and the service method runs on the services' own thread pool (sized in config: in
the split topology those threads mostly wait on other deployments) in a copy of this context, so
every hop below bounds itself by what is left.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import json
import logging
import time
import uuid
from typing import Any, Callable, Optional

from fastapi import FastAPI, Header, Query, Request
from fastapi import Path as FastApiPath
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from citadel.errors import CitadelError, DeadlineExceeded, InvalidRequest, Unavailable
from citadel.identity.credentials import ServiceIdentity
from citadel.resilience.deadline import Deadline, deadline_scope
from citadel.resilience.clock import MonotonicClock
from citadel.tools.reviews import REVIEW_PENDING
from citadel.types import validate_tenant_id
from serving.http.admission import REQUEST_ID_HEADER, Admission
from serving.http.errors import error_body
from serving.http.metrics import require_metrics_credential
from serving.http.models import (ERRORS, AclRequest, AnswerRequest, CandidateLabel, DecisionRequest, FaultRequest,
                                 FeedbackRequest, MessageRequest, PauseRequest, RetrieveRequest, RetrieveResponse,
                                 ReviewPendingBody, UploadRequest)
from serving.http.models import AnswerResponse as AnswerBody
from serving.services.access import Caller
from serving.services.compose import Services
from serving.services.prompts import prompt_reads
from serving.services.runs import is_terminal

log = logging.getLogger(__name__)

API_VERSION = "1"
IDEMPOTENCY_HEADER = "idempotency-key"
# The largest row id a path may name (a catalog row id is a 64-bit integer; larger is a 422, not a 500).
MAX_ROW_ID = 2**63 - 1
_CLOCK = MonotonicClock()

_process_services: Services | None = None
_executor: concurrent.futures.ThreadPoolExecutor | None = None


def install_services(services: Services) -> None:
    """Make `services` the ones this process's routes use (a Serve replica calls this in __init__)."""
    global _process_services, _executor
    _process_services = services
    _executor = concurrent.futures.ThreadPoolExecutor(services.config.serving.gateway_threads,
                                                      thread_name_prefix="gateway")


# ---------------------------------------------------------------------- helpers
def request_id_of(request: Request) -> str:
    """The server's id of this request (serving/http/admission.py sets it before any route runs)."""
    return getattr(request.state, "request_id", None) or uuid.uuid4().hex


def _services_of_scope(scope: dict) -> Services | None:
    app = scope.get("app")
    return getattr(getattr(app, "state", None), "services", None) or _process_services


def _services(request: Request) -> Services:
    services = getattr(request.app.state, "services", None) or _process_services
    if services is None:
        raise Unavailable("the gateway is still starting", code="overloaded")
    return services


async def _run(request: Request, fn: Callable[..., Any], *args: Any) -> Any:
    """Run blocking service work on the services' threads within the request's deadline, opened here."""
    services = _services(request)
    timeout_s = services.config.serving.request_timeout_s
    executor = getattr(request.app.state, "executor", None) or _executor
    with deadline_scope(Deadline.after(timeout_s, _CLOCK)) as deadline:
        context = contextvars.copy_context()  # the worker thread sees this request's deadline
        future = asyncio.get_running_loop().run_in_executor(executor, functools.partial(context.run, fn, *args))
        try:
            return await asyncio.wait_for(future, deadline.remaining())
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"no answer within {timeout_s:g} s") from None


def _error_response(request: Request, code: str, message: str, status: int,
                    retry_after_s: float | None = None) -> JSONResponse:
    request_id = request_id_of(request)
    headers = {REQUEST_ID_HEADER: request_id}
    if retry_after_s is not None:
        headers["retry-after"] = str(max(1, int(retry_after_s)))
    return JSONResponse(error_body(code, message, request_id), status_code=status, headers=headers)


def _request_ids(request: Request) -> tuple[str, str | None]:
    """The server's id of this request and the client's correlation id, for the query services' logs."""
    return request_id_of(request), getattr(request.state, "correlation_id", None)


def _tenant_or_everywhere(tenant_id: Optional[str]) -> Optional[str]:
    if tenant_id is not None:
        validate_tenant_id(tenant_id)
    return tenant_id


def _admin(request: Request, services: Services, authorization: Optional[str]) -> ServiceIdentity:
    """The admin serving/http/admission.py verified before the body was read (verified here only when
    the app runs without that middleware)."""
    return getattr(request.state, "admin", None) or services.access.admin(authorization)


# ---------------------------------------------------------------------- the app
def create_api() -> FastAPI:
    app = FastAPI(title="Citadel", version=API_VERSION,
                  description="Multi-tenant, ACL-safe retrieval and cited answers. Every error is "
                              '`{"error": {"code", "message", "request_id"}}`.')

    # Request ids, authentication and body limits, all before any route reads the body.
    app.add_middleware(Admission, services_of=_services_of_scope)
    _add_error_handlers(app)
    _add_query_routes(app)
    _add_run_routes(app)
    _add_admin_routes(app)
    _add_candidate_routes(app)
    _add_drill_routes(app)
    from serving.http.review_page import add_review_routes  # it imports this module's helpers
    add_review_routes(app)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(CitadelError)
    async def _known(request: Request, error: CitadelError):
        return _error_response(request, error.code, error.message, error.http_status, error.retry_after_s)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError):
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in error.errors())
        return _error_response(request, InvalidRequest.code, problems or "invalid request", InvalidRequest.http_status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code)
        if code is None:  # an unparsable body is reported like any invalid request (422)
            return _error_response(request, InvalidRequest.code, str(error.detail), InvalidRequest.http_status)
        return _error_response(request, code, str(error.detail), error.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception):
        log.exception("unhandled error in %s %s", request.method, request.url.path)
        return _error_response(request, "internal_error", "internal error; see the server log with this request id",
                               500)


def _add_query_routes(app: FastAPI) -> None:
    @app.get("/healthz")
    async def healthz(request: Request) -> dict:
        return {"status": "ok", "topology": _services(request).config.serving.topology}

    @app.get("/metrics", response_class=Response, responses=ERRORS)
    async def metrics(request: Request, authorization: Optional[str] = Header(None)) -> Response:
        """Prometheus metrics, for a metrics credential only (`serving.metrics_tokens_sha256`)."""
        services = _services(request)
        require_metrics_credential(authorization, services.config.serving.metrics_tokens_sha256)
        return Response(services.metrics.render(), media_type=services.metrics.content_type)

    @app.post("/v1/retrieve", response_model=RetrieveResponse, responses=ERRORS)
    async def retrieve(request: Request, body: RetrieveRequest,
                       authorization: Optional[str] = Header(None),
                       x_citadel_user_context: Optional[str] = Header(None)) -> dict:
        return await _caller_call(request, "retrieve", lambda services: services.query.retrieve, body.query,
                                  body.top_k, *_request_ids(request))

    @app.post("/v1/answer", response_model=AnswerBody, responses={**ERRORS, 202: {"model": ReviewPendingBody}})
    async def answer(request: Request, body: AnswerRequest,
                     authorization: Optional[str] = Header(None),
                     x_citadel_user_context: Optional[str] = Header(None)) -> Any:
        """A cited answer or a refusal; `202 review_pending` when a failed check holds the answer for a
        person (citadel/tools/reviews.py): ask again once it is reviewed."""
        result = await _caller_call(request, "answer", lambda services: services.query.answer, body.question,
                                    *_request_ids(request))
        if result.get("status") == REVIEW_PENDING:
            return JSONResponse(ReviewPendingBody(**result).model_dump(), status_code=202)
        return result


async def _caller_call(request: Request, endpoint: str, method: Callable[[Services], Callable[..., Any]],
                       *args: Any) -> Any:
    """An end user's request: identity first (401 before any work: serving/http/admission.py verified
    it before the body was read), then the service method `(caller, *args)` on the worker threads,
    counted per endpoint, tenant and status. (The routes still declare the identity headers, so the
    OpenAPI document shows them.)"""
    services = _services(request)
    caller: Caller = getattr(request.state, "caller", None) or services.access.caller(
        request.headers.get("authorization"), request.headers.get("x-citadel-user-context"))
    started = time.perf_counter()
    try:
        result = await _run(request, method(services), caller, *args)
    except CitadelError as error:
        services.metrics.count_request(endpoint, caller.principal.tenant_id, error.http_status,
                                       time.perf_counter() - started)
        raise
    services.metrics.count_request(endpoint, caller.principal.tenant_id, 200, time.perf_counter() - started)
    return result


def _add_run_routes(app: FastAPI) -> None:
    """Conversations and runs (DESIGN.md §10): a message starts a run; its events replay from any seq."""

    @app.post("/v1/conversations", status_code=201, responses=ERRORS)
    async def create_conversation(request: Request) -> dict:
        return await _caller_call(request, "conversations", lambda s: s.runs.create_conversation)

    @app.delete("/v1/conversations/{conversation_id}", responses=ERRORS)
    async def delete_conversation(request: Request, conversation_id: str) -> dict:
        return await _caller_call(request, "conversations", lambda s: s.runs.delete_conversation, conversation_id)

    @app.delete("/v1/me/data", responses=ERRORS)
    async def delete_my_data(request: Request) -> dict:
        """Delete all of the calling user's conversations, memories, runs and run events (audited)."""
        return await _caller_call(request, "me", lambda s: s.runs.delete_my_data)

    @app.post("/v1/conversations/{conversation_id}/messages", status_code=202, responses=ERRORS)
    async def post_message(request: Request, conversation_id: str, body: MessageRequest) -> dict:
        return await _caller_call(request, "messages", lambda s: s.runs.post_message, conversation_id, body.content)

    @app.get("/v1/runs/{run_id}", responses=ERRORS)
    async def get_run(request: Request, run_id: str) -> dict:
        return await _caller_call(request, "runs", lambda s: s.runs.run, run_id)

    @app.post("/v1/runs/{run_id}:cancel", responses=ERRORS)
    async def cancel_run(request: Request, run_id: str) -> dict:
        return await _caller_call(request, "runs", lambda s: s.runs.cancel, run_id)

    @app.get("/v1/runs/{run_id}/events", responses=ERRORS)
    async def run_events(request: Request, run_id: str, after_seq: int = Query(0, ge=0),
                         last_event_id: Optional[str] = Header(None)) -> Any:
        """Server-Sent Events (`id:` = seq; `Last-Event-ID` honoured) until the final or error event;
        with `Accept: application/json`, the events so far as a list. `final` is authoritative."""
        after = max(after_seq, _seq_of(last_event_id))
        events = await _caller_call(request, "events", lambda s: s.runs.events, run_id, after)  # 404 first
        if "application/json" in request.headers.get("accept", ""):
            return events
        return StreamingResponse(_event_stream(request, run_id, after, events), media_type="text/event-stream",
                                 headers={"cache-control": "no-store", "x-accel-buffering": "no"})

    @app.get("/v1/approvals", responses=ERRORS)
    async def list_approvals(request: Request, status: Optional[str] = Query("pending", max_length=16)) -> dict:
        """The caller's tenant's approvals that one of the caller's groups may decide."""
        return await _caller_call(request, "approvals", lambda s: s.approvals.list, status)

    @app.post("/v1/approvals/{approval_id}:decide", responses=ERRORS)
    async def decide_approval(request: Request, approval_id: str, body: DecisionRequest) -> dict:
        """approve | edit_and_approve (edits checked by the policy engine) | reject; once (409 after)."""
        return await _caller_call(request, "approvals", lambda s: s.approvals.decide, approval_id, body.decision,
                                  body.edits, body.comment)

    @app.post("/v1/answers/{answer_id}/feedback", responses=ERRORS)
    async def feedback(request: Request, answer_id: str, body: FeedbackRequest) -> dict:
        return await _caller_call(request, "feedback", lambda s: s.runs.feedback, answer_id, body.vote, body.reason,
                                  body.comment)


def _seq_of(last_event_id: Optional[str]) -> int:
    """A reconnecting client's `Last-Event-ID` (a seq we sent); anything else counts as none."""
    value = (last_event_id or "").strip()
    return int(value) if value.isdigit() and len(value) <= 12 else 0


async def _event_stream(request: Request, run_id: str, after: int, events: list[dict]):
    """Every event after `after`, once, in order — `events` first (already read), then as they are
    recorded — ending with the run's final or error event; a comment line keeps an idle connection
    open, and a departed client ends the loop."""
    services = _services(request)
    caller = request.state.caller
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


def _add_admin_routes(app: FastAPI) -> None:
    async def _write(request: Request, scope: str, key: Optional[str], payload: dict, action: Callable[[], dict],
                     status_code: int = 200) -> JSONResponse:
        services = _services(request)
        _check_groups(payload.get("groups", ()), services.config.serving)
        body, status = await _run(request, services.admin.idempotent, scope, key, payload, action, status_code)
        return JSONResponse(body, status_code=status)

    @app.post("/v1/admin/tenants/{tenant_id}/documents", status_code=202, responses=ERRORS)
    async def upload(request: Request, tenant_id: str, body: UploadRequest,
                     authorization: Optional[str] = Header(None),
                     idempotency_key: Optional[str] = Header(None)) -> JSONResponse:
        """Upload a document; starts an ingestion job and returns its id (poll /v1/admin/jobs/{id})."""
        services = _services(request)
        admin = _admin(request, services, authorization)
        validate_tenant_id(tenant_id)  # 400 `invalid_tenant` before the catalog or a directory sees it
        payload = {"tenant": tenant_id, **body.model_dump()}
        action = functools.partial(services.admin.upload, admin, tenant_id, body.document_id, body.filename,
                                   body.content(), body.groups, fields=body.trusted_fields())
        return await _write(request, f"upload:{admin.id}", idempotency_key, payload, action, 202)

    @app.get("/v1/admin/jobs/{job_id}", responses=ERRORS)
    async def job(request: Request, job_id: str, authorization: Optional[str] = Header(None)) -> dict:
        services = _services(request)
        return await _run(request, services.admin.job, _admin(request, services, authorization), job_id)

    @app.post("/v1/admin/tenants/{tenant_id}/documents/{document_id}/withdraw", responses=ERRORS)
    async def withdraw(request: Request, tenant_id: str, document_id: str,
                       authorization: Optional[str] = Header(None),
                       idempotency_key: Optional[str] = Header(None)) -> JSONResponse:
        services = _services(request)
        admin = _admin(request, services, authorization)
        validate_tenant_id(tenant_id)
        payload = {"tenant": tenant_id, "document": document_id}
        action = functools.partial(services.admin.withdraw, admin, tenant_id, document_id)
        return await _write(request, f"withdraw:{admin.id}", idempotency_key, payload, action)

    @app.get("/v1/admin/prompts/{request_id}", responses=ERRORS)
    async def kept_prompt(request: Request, request_id: str, authorization: Optional[str] = Header(None)) -> dict:
        """What the generator was sent and returned for a request (kept encrypted for
        `answer.prompt_retention_days`): platform admins only, and every read is audited."""
        services = _services(request)
        return await _run(request, prompt_reads(services.wiring).read, _admin(request, services, authorization),
                          request_id)

    @app.get("/v1/admin/tools", responses=ERRORS)
    async def list_tools(request: Request, authorization: Optional[str] = Header(None)) -> dict:
        """What an admin may pause (the registry's tools and `model`) and the pauses in force."""
        services = _services(request)
        return await _run(request, services.admin.tools, _admin(request, services, authorization))

    @app.post("/v1/admin/tools/{target}:pause", responses=ERRORS)
    async def pause_tool(request: Request, target: str, body: PauseRequest,
                         authorization: Optional[str] = Header(None)) -> dict:
        """Pause a tool or the model for a tenant or everywhere, without a restart: a paused tool
        refuses with `tool_paused`; a paused model answers with quotes (`model_paused`)."""
        services = _services(request)
        return await _run(request, services.admin.pause, _admin(request, services, authorization), target,
                          _tenant_or_everywhere(body.tenant_id))

    @app.post("/v1/admin/tools/{target}:resume", responses=ERRORS)
    async def resume_tool(request: Request, target: str, body: PauseRequest,
                          authorization: Optional[str] = Header(None)) -> dict:
        services = _services(request)
        return await _run(request, services.admin.resume, _admin(request, services, authorization), target,
                          _tenant_or_everywhere(body.tenant_id))

    @app.put("/v1/admin/tenants/{tenant_id}/documents/{document_id}/acl", responses=ERRORS)
    async def set_acl(request: Request, tenant_id: str, document_id: str, body: AclRequest,
                      authorization: Optional[str] = Header(None),
                      idempotency_key: Optional[str] = Header(None)) -> JSONResponse:
        services = _services(request)
        admin = _admin(request, services, authorization)
        validate_tenant_id(tenant_id)
        payload = {"tenant": tenant_id, "document": document_id, "groups": sorted(body.groups)}
        action = functools.partial(services.admin.set_acl, admin, tenant_id, document_id, list(body.groups))
        return await _write(request, f"acl:{admin.id}", idempotency_key, payload, action)


def _add_candidate_routes(app: FastAPI) -> None:
    """Candidate test items (serving/services/candidates.py): a tenant's admin lists the queue and
    promotes an item into the labeled sets with a label, or dismisses it."""

    @app.get("/v1/admin/candidates", responses=ERRORS)
    async def list_candidates(request: Request, tenant: str = Query(..., max_length=64),
                              source: Optional[str] = Query(None, max_length=80),
                              status: Optional[str] = Query("pending", max_length=16),
                              limit: int = Query(100, ge=1, le=500),
                              after_id: int = Query(0, ge=0, le=MAX_ROW_ID),
                              authorization: Optional[str] = Header(None)) -> dict:
        """The tenant's candidates, oldest first: `source` answer_feedback or tool:<name>; `status`
        pending (default), promoted or dismissed; `limit` per page, the next page `after_id` the last id."""
        services = _services(request)
        return await _run(request, services.candidates.list, _admin(request, services, authorization), tenant,
                          source, status, limit, after_id)

    @app.post("/v1/admin/candidates/{candidate_id}/promote", responses=ERRORS)
    async def promote_candidate(request: Request, body: CandidateLabel,
                                candidate_id: int = FastApiPath(..., ge=1, le=MAX_ROW_ID),
                                authorization: Optional[str] = Header(None)) -> dict:
        """Promote a pending candidate into the labeled sets with the owner's label (once: 409 after)."""
        services = _services(request)
        return await _run(request, services.candidates.promote, _admin(request, services, authorization),
                          candidate_id, body.model_dump(exclude_none=True))

    @app.post("/v1/admin/candidates/{candidate_id}/dismiss", responses=ERRORS)
    async def dismiss_candidate(request: Request, candidate_id: int = FastApiPath(..., ge=1, le=MAX_ROW_ID),
                                authorization: Optional[str] = Header(None)) -> dict:
        services = _services(request)
        return await _run(request, services.candidates.dismiss, _admin(request, services, authorization),
                          candidate_id)


def _add_drill_routes(app: FastAPI) -> None:
    """Fault injection for failure drills: platform admins only, and refused unless serving.fault_injection."""

    @app.get("/v1/admin/faults", responses=ERRORS)
    async def list_faults(request: Request, authorization: Optional[str] = Header(None)) -> dict:
        services = _services(request)
        return await _run(request, services.drills.list_faults, _admin(request, services, authorization))

    @app.put("/v1/admin/faults/{stage}", responses=ERRORS)
    async def set_fault(request: Request, stage: str, body: FaultRequest,
                        authorization: Optional[str] = Header(None)) -> dict:
        """Add latency (fixed or a distribution), errors, a hang, or kill one replica of a stage."""
        services = _services(request)
        admin = _admin(request, services, authorization)
        return await _run(request, services.drills.set_fault, admin,
                          {**body.model_dump(exclude_none=True), "stage": stage})

    @app.delete("/v1/admin/faults/{stage}", responses=ERRORS)
    async def clear_fault(request: Request, stage: str, authorization: Optional[str] = Header(None)) -> dict:
        services = _services(request)
        return await _run(request, services.drills.clear_fault, _admin(request, services, authorization), stage)


def _check_groups(groups, serving) -> None:
    """An admin write names at most `serving.max_groups` groups of 1 to `serving.max_name_chars`
    printable characters each (422), checked before anything is stored."""
    if len(groups) > serving.max_groups:
        raise InvalidRequest(f"{len(groups):,} groups; at most {serving.max_groups:,} may be named")
    for group in groups:
        if not 0 < len(group) <= serving.max_name_chars or not group.isprintable():
            raise InvalidRequest(f"group names are 1 to {serving.max_name_chars} printable characters")
