"""The HTTP API (DESIGN.md §9): FastAPI routes over a `Gateway`, one JSON error shape.

The app is built once per process and served either by Ray Serve (serving/app.py wraps it with
`serve.ingress`) or by any ASGI server / TestClient. Routes find their Gateway on `app.state.gateway`
or, inside a Serve replica, the one the replica installed with `install_gateway` (one per process).
Stage work runs on the gateway's own thread pool (sized in config: in the split topology those
threads mostly wait on other deployments), under the request deadline.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import functools
import logging
import re
import uuid
from typing import Any, Callable, Literal, Optional, Union

from fastapi import FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from citadel.errors import CitadelError, InvalidTenant
from citadel.sources import TrustedFields
from citadel.types import validate_tenant_id
from serving.admission import REQUEST_ID_HEADER, Admission
from serving.errors import ApiError, error_body, status_for
from serving.gateway import Gateway
from serving.metrics import require_metrics_credential

log = logging.getLogger(__name__)

API_VERSION = "1"
IDEMPOTENCY_HEADER = "idempotency-key"
MAX_QUESTION_CHARS = 2_000
MAX_TOP_K = 50
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"

_process_gateway: Gateway | None = None
_executor: concurrent.futures.ThreadPoolExecutor | None = None


def install_gateway(gateway: Gateway) -> None:
    """Make `gateway` the one this process's routes use (a Serve replica calls this in __init__)."""
    global _process_gateway, _executor
    _process_gateway = gateway
    _executor = concurrent.futures.ThreadPoolExecutor(gateway.config.serving.gateway_threads,
                                                      thread_name_prefix="gateway")


# ---------------------------------------------------------------------- request and response bodies
class _Body(BaseModel):
    # Unknown fields are ignored, never trusted: a `tenant_id` or `groups` in a body changes nothing.
    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="after")
    def _utf8_only(self) -> "_Body":
        # JSON may spell a lone surrogate ("\ud800"); such a string cannot be stored or hashed as
        # UTF-8, so it is refused here with a 422 instead of failing deep inside a stage.
        for name, value in self:
            for text in value if isinstance(value, list) else [value]:
                if isinstance(text, str) and not _utf8(text):
                    raise ValueError(f"{name} is not valid Unicode text (a lone surrogate)")
        return self


class RetrieveRequest(_Body):
    query: str = Field(..., min_length=1, max_length=MAX_QUESTION_CHARS, description="What to search for.")
    top_k: int = Field(8, ge=1, le=MAX_TOP_K, description="Passages to return.")


class AnswerRequest(_Body):
    # An empty question is answered with a clarifying question (issue 13), not a validation error.
    question: str = Field(..., max_length=MAX_QUESTION_CHARS, description="The question.")


class UploadRequest(_Body):
    document_id: str = Field(..., pattern=NAME_PATTERN, description="Stable id of the document in its tenant.")
    filename: str = Field(..., min_length=1, max_length=255, description="Name with its type: .md, .txt or .pdf.")
    text: Optional[str] = Field(None, description="The document as text (Markdown or plain).")
    content_base64: Optional[str] = Field(None, description="The document's bytes, base64 (e.g. a PDF).")
    groups: list[str] = Field(default_factory=list, description="Groups that may read it (empty: nobody).")
    # Trusted fields: only the request sets them; the document's own front matter never does.
    owner: Optional[str] = Field(None, max_length=256, description="Who owns the document.")
    status: Optional[Literal["draft", "published", "archived", "withdrawn"]] = Field(
        None, description="Only a published status (ingest.published_statuses) is served; others are skipped.")
    effective_date: Optional[str] = Field(None, pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
                                          description="ISO date (YYYY-MM-DD) the document takes effect.")
    supersedes: Optional[str] = Field(None, pattern=NAME_PATTERN,
                                      description="Id of a document of the same tenant this one replaces.")

    @model_validator(mode="after")
    def _one_content(self) -> "UploadRequest":
        if (self.text is None) == (self.content_base64 is None):
            raise ValueError("give exactly one of `text` or `content_base64`")
        self.trusted_fields()  # a real calendar date, printable names: refused here with a 422
        return self

    def trusted_fields(self) -> TrustedFields:
        try:
            return TrustedFields(owner=self.owner or "", status=self.status, effective_date=self.effective_date,
                                 supersedes=self.supersedes)
        except CitadelError as error:
            raise ValueError(str(error)) from None

    def content(self) -> bytes:
        if self.text is not None:
            return self.text.encode("utf-8")
        try:
            return base64.b64decode(self.content_base64 or "", validate=True)
        except (binascii.Error, ValueError):
            raise ApiError("invalid_request", "content_base64 is not valid base64") from None


class AclRequest(_Body):
    groups: list[str] = Field(..., description="Groups that may read the document from now on.")


class FaultRequest(_Body):
    """A drill's fault on one stage (see citadel/drills/faults.py FaultSpec for the semantics)."""

    latency_ms: float = Field(0.0, ge=0, description="Added latency (the mean or median for distributions).")
    latency_dist: Literal["fixed", "uniform", "exponential", "lognormal"] = "fixed"
    latency_jitter_ms: float = Field(0.0, ge=0)
    error_rate: float = Field(0.0, ge=0, le=1, description="Share of calls that fail.")
    hang: bool = Field(False, description="Calls wait until the fault is cleared (or max_hang_s).")
    max_hang_s: Optional[float] = Field(None, gt=0)
    replicas: Union[Literal["all"], list[int]] = Field("all", description="Replica ranks affected.")
    kill: bool = Field(False, description="Kill one affected replica (Serve restarts it).")
    kill_nonce: Optional[str] = None


class Citation(BaseModel):
    chunk_id: str
    document_id: str
    title: str
    version: int
    heading: str
    page: Optional[int]
    source: str


class Passage(Citation):
    """A retrieved passage: where it is from (as a citation), its text and its fused score."""

    text: str
    score: float


class RetrieveResponse(BaseModel):
    request_id: str
    plan: str
    degraded: list[str]
    passages: list[Passage]


class AnswerResponse(BaseModel):
    request_id: str
    answer: str
    refused: bool
    reason: Optional[str]
    degraded: list[str]
    citations: list[Citation]
    cached: bool = False


class ErrorDetail(BaseModel):
    code: str = Field(..., description="Machine-readable; see serving/errors.py STATUS_BY_CODE.")
    message: str
    request_id: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


ERRORS = {status: {"model": ErrorResponse} for status in (400, 401, 403, 404, 409, 413, 422, 429, 503, 504)}


# ---------------------------------------------------------------------- helpers
def request_id_of(request: Request) -> str:
    """The server's id of this request (serving/admission.py sets it before any route runs)."""
    return getattr(request.state, "request_id", None) or uuid.uuid4().hex


def _gateway_of_scope(scope: dict) -> Gateway | None:
    app = scope.get("app")
    return getattr(getattr(app, "state", None), "gateway", None) or _process_gateway


def _gateway(request: Request) -> Gateway:
    gateway = getattr(request.app.state, "gateway", None) or _process_gateway
    if gateway is None:
        raise ApiError("overloaded", "the gateway is still starting")
    return gateway


async def _run(request: Request, fn: Callable[..., Any], *args: Any) -> Any:
    """Run blocking stage work on the gateway's threads, bounded by the request deadline."""
    gateway = _gateway(request)
    loop = asyncio.get_running_loop()
    executor = getattr(request.app.state, "executor", None) or _executor
    future = loop.run_in_executor(executor, functools.partial(fn, *args))
    try:
        return await asyncio.wait_for(future, gateway.config.serving.request_timeout_s)
    except asyncio.TimeoutError:
        raise ApiError("deadline_exceeded",
                       f"no answer within {gateway.config.serving.request_timeout_s:g} s") from None


def _error_response(request: Request, code: str, message: str, retry_after_s: float | None = None) -> JSONResponse:
    request_id = request_id_of(request)
    headers = {REQUEST_ID_HEADER: request_id}
    if retry_after_s is not None:
        headers["retry-after"] = str(max(1, int(retry_after_s)))
    return JSONResponse(error_body(code, message, request_id), status_code=status_for(code), headers=headers)


async def _user_call(request: Request, endpoint: str, authorization: Optional[str], user_context: Optional[str],
                     method: Callable[[Gateway], Callable[..., dict]], *args: Any) -> dict:
    """An end user's request: identity first (401 before any work: serving/admission.py verified it
    before the body was read), then the gateway method on the worker threads with the request and
    correlation ids, counted per endpoint, tenant and status."""
    gateway = _gateway(request)
    caller = getattr(request.state, "caller", None) or gateway.caller(authorization, user_context)
    tenant = caller.principal.tenant_id
    try:
        result = await _run(request, method(gateway), caller, *args, request_id_of(request),
                            getattr(request.state, "correlation_id", None))
    except ApiError as error:
        _count(request, endpoint, tenant, error.status)
        raise
    _count(request, endpoint, tenant, 200)
    return result


def _admin(request: Request, gateway: Gateway, authorization: Optional[str]):
    """The admin serving/admission.py verified before the body was read (verified here only when
    the app runs without that middleware)."""
    return getattr(request.state, "admin", None) or gateway.admin(authorization)


def _count(request: Request, endpoint: str, tenant: str, status: int) -> None:
    gateway = getattr(request.app.state, "gateway", None) or _process_gateway
    if gateway is not None:
        gateway.metrics.count_request(endpoint, tenant, status)


# ---------------------------------------------------------------------- the app
def create_api() -> FastAPI:
    app = FastAPI(title="Citadel", version=API_VERSION,
                  description="Multi-tenant, ACL-safe retrieval and cited answers. Every error is "
                              '`{"error": {"code", "message", "request_id"}}`.')

    # Request ids, authentication and body limits, all before any route reads the body.
    app.add_middleware(Admission, gateway_of=_gateway_of_scope)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, error: ApiError):
        return _error_response(request, error.code, error.message, error.retry_after_s)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError):
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in error.errors())
        return _error_response(request, "invalid_request", problems or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "invalid_request")
        response = _error_response(request, code, str(error.detail))
        if code != "invalid_request":  # an unparsable body is reported like any invalid request (422)
            response.status_code = error.status_code
        return response

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception):
        log.exception("unhandled error in %s %s", request.method, request.url.path)
        return _error_response(request, "internal_error", "internal error; see the server log with this request id")

    @app.get("/healthz")
    async def healthz(request: Request) -> dict:
        gateway = _gateway(request)
        return {"status": "ok", "topology": gateway.config.serving.topology}

    @app.get("/metrics", response_class=Response, responses=ERRORS)
    async def metrics(request: Request, authorization: Optional[str] = Header(None)) -> Response:
        """Prometheus metrics, for a metrics credential only (`serving.metrics_tokens_sha256`)."""
        gateway = _gateway(request)
        require_metrics_credential(authorization, gateway.config.serving.metrics_tokens_sha256)
        return Response(gateway.metrics.render(), media_type=gateway.metrics.content_type)

    @app.post("/v1/retrieve", response_model=RetrieveResponse, responses=ERRORS)
    async def retrieve(request: Request, body: RetrieveRequest,
                       authorization: Optional[str] = Header(None),
                       x_citadel_user_context: Optional[str] = Header(None)) -> dict:
        return await _user_call(request, "retrieve", authorization, x_citadel_user_context,
                                lambda gateway: gateway.retrieve, body.query, body.top_k)

    @app.post("/v1/answer", response_model=AnswerResponse, responses=ERRORS)
    async def answer(request: Request, body: AnswerRequest,
                     authorization: Optional[str] = Header(None),
                     x_citadel_user_context: Optional[str] = Header(None)) -> dict:
        return await _user_call(request, "answer", authorization, x_citadel_user_context,
                                lambda gateway: gateway.answer, body.question)

    _add_admin_routes(app)
    _add_drill_routes(app)
    return app


def _add_admin_routes(app: FastAPI) -> None:
    async def _write(request: Request, scope: str, key: Optional[str], payload: dict, action: Callable[[], dict],
                     status_code: int = 200) -> JSONResponse:
        gateway = _gateway(request)
        _check_groups(payload.get("groups", ()), gateway.config.serving)
        body, status = await _run(request, gateway.idempotent, scope, key, payload, action, status_code)
        return JSONResponse(body, status_code=status)

    @app.post("/v1/admin/tenants/{tenant_id}/documents", status_code=202, responses=ERRORS)
    async def upload(request: Request, tenant_id: str, body: UploadRequest,
                     authorization: Optional[str] = Header(None),
                     idempotency_key: Optional[str] = Header(None)) -> JSONResponse:
        """Upload a document; starts an ingestion job and returns its id (poll /v1/admin/jobs/{id})."""
        gateway = _gateway(request)
        admin = _admin(request, gateway, authorization)
        _check_tenant(tenant_id)
        content = body.content()
        payload = {"tenant": tenant_id, **body.model_dump()}
        action = functools.partial(gateway.upload, admin, tenant_id, body.document_id, body.filename,
                                   content, body.groups, fields=body.trusted_fields())
        return await _write(request, f"upload:{admin.id}", idempotency_key, payload, action, 202)

    @app.get("/v1/admin/jobs/{job_id}", responses=ERRORS)
    async def job(request: Request, job_id: str, authorization: Optional[str] = Header(None)) -> dict:
        gateway = _gateway(request)
        admin = _admin(request, gateway, authorization)
        return await _run(request, gateway.job, admin, job_id)

    @app.post("/v1/admin/tenants/{tenant_id}/documents/{document_id}/withdraw", responses=ERRORS)
    async def withdraw(request: Request, tenant_id: str, document_id: str,
                       authorization: Optional[str] = Header(None),
                       idempotency_key: Optional[str] = Header(None)) -> JSONResponse:
        gateway = _gateway(request)
        admin = _admin(request, gateway, authorization)
        _check_tenant(tenant_id)
        payload = {"tenant": tenant_id, "document": document_id}
        action = functools.partial(gateway.withdraw, admin, tenant_id, document_id)
        return await _write(request, f"withdraw:{admin.id}", idempotency_key, payload, action)

    @app.put("/v1/admin/tenants/{tenant_id}/documents/{document_id}/acl", responses=ERRORS)
    async def set_acl(request: Request, tenant_id: str, document_id: str, body: AclRequest,
                      authorization: Optional[str] = Header(None),
                      idempotency_key: Optional[str] = Header(None)) -> JSONResponse:
        gateway = _gateway(request)
        admin = _admin(request, gateway, authorization)
        _check_tenant(tenant_id)
        payload = {"tenant": tenant_id, "document": document_id, "groups": sorted(body.groups)}
        action = functools.partial(gateway.set_acl, admin, tenant_id, document_id, list(body.groups))
        return await _write(request, f"acl:{admin.id}", idempotency_key, payload, action)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _add_drill_routes(app: FastAPI) -> None:
    """Fault injection for failure drills: admin only, and refused unless serving.fault_injection."""

    @app.get("/v1/admin/faults", responses=ERRORS)
    async def list_faults(request: Request, authorization: Optional[str] = Header(None)) -> dict:
        gateway = _gateway(request)
        admin = _admin(request, gateway, authorization)
        return await _run(request, gateway.list_faults, admin)

    @app.put("/v1/admin/faults/{stage}", responses=ERRORS)
    async def set_fault(request: Request, stage: str, body: FaultRequest,
                        authorization: Optional[str] = Header(None)) -> dict:
        """Add latency (fixed or a distribution), errors, a hang, or kill one replica of a stage."""
        gateway = _gateway(request)
        admin = _admin(request, gateway, authorization)
        return await _run(request, gateway.set_fault, admin, {**body.model_dump(exclude_none=True), "stage": stage})

    @app.delete("/v1/admin/faults/{stage}", responses=ERRORS)
    async def clear_fault(request: Request, stage: str, authorization: Optional[str] = Header(None)) -> dict:
        gateway = _gateway(request)
        admin = _admin(request, gateway, authorization)
        return await _run(request, gateway.clear_fault, admin, stage)


def _check_groups(groups, serving) -> None:
    """An admin write names at most `serving.max_groups` groups of 1 to `serving.max_name_chars`
    printable characters each (422), checked before anything is stored."""
    if len(groups) > serving.max_groups:
        raise ApiError("invalid_request", f"{len(groups):,} groups; at most {serving.max_groups:,} may be named")
    for group in groups:
        if not 0 < len(group) <= serving.max_name_chars or not group.isprintable():
            raise ApiError("invalid_request",
                           f"group names are 1 to {serving.max_name_chars} printable characters")


def _check_name(value: str, what: str) -> None:
    if not re.fullmatch(NAME_PATTERN, value):  # a full match: `$` alone accepts a trailing newline
        raise ApiError("invalid_request", f"{what} must match {NAME_PATTERN}")


def _check_tenant(tenant_id: str) -> None:
    """A tenant id from a URL is checked like every other entry point's (400 `invalid_tenant`),
    before the catalog or an upload directory sees it."""
    try:
        validate_tenant_id(tenant_id)
    except InvalidTenant as error:
        raise ApiError(error.code, str(error)) from None

