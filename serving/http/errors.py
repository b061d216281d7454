"""One JSON error shape for every failure the API returns (DESIGN.md §9).

    {"error": {"code": "<machine-readable>", "message": "<for people>", "request_id": "<id>"}}

`code` is stable; clients branch on it. The status comes from the error's class in the error tree
(citadel/errors.py), so a new error needs no row here. Unknown failures are 500 `internal_error`
and never leak a traceback. `add_error_handlers` installs the mapping on an app.

The OpenAI-compatible family (serving/http/routers/openai/) answers in OpenAI's shape instead, so the
openai SDKs raise their own exception types:

    {"error": {"message", "type": "<OpenAI's, by status>", "param": null, "code", "request_id"}}

and a refused request there is 400 (OpenAI's invalid-request status), not 422.
"""

from __future__ import annotations

import logging
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from citadel.errors import CitadelError, InvalidRequest

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-request-id"
HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}
# The OpenAI family's paths (serving/http/routers/openai/routes.py).
OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")
OPENAI_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


def error_body(code: str, message: str, request_id: str) -> dict:
    return {"error": {"code": code, "message": message, "request_id": request_id}}


def openai_path(path: str) -> bool:
    return path in OPENAI_PATHS or path.startswith("/v1/models/")


def openai_error_body(code: str, message: str, request_id: str, status: int) -> dict:
    kind = OPENAI_TYPES.get(status) or ("server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code, "request_id": request_id}}


def error_body_for(path: str, code: str, message: str, request_id: str, status: int) -> dict:
    """The error body a route of `path` answers with (the admission middleware's too, given the path)."""
    if openai_path(path):
        return openai_error_body(code, message, request_id, status)
    return error_body(code, message, request_id)


def error_status_for(path: str, status: int) -> int:
    """OpenAI refuses a request it cannot take with 400 (its SDK's BadRequestError), never 422."""
    return 400 if status == 422 and openai_path(path) else status


def request_id_of(request: Request) -> str:
    """The server's id of this request (serving/http/admission.py sets it before any route runs)."""
    return getattr(request.state, "request_id", None) or uuid.uuid4().hex


def retry_after(seconds: float | None) -> dict[str, str]:
    """The Retry-After header of a refusal that says when to come back (whole seconds, at least 1)."""
    return {} if seconds is None else {"retry-after": str(max(1, int(seconds)))}


def error_response(request: Request, code: str, message: str, status: int,
                   retry_after_s: float | None = None) -> JSONResponse:
    request_id = request_id_of(request)
    headers = {REQUEST_ID_HEADER: request_id, **retry_after(retry_after_s)}
    path = request.url.path
    status = error_status_for(path, status)
    return JSONResponse(error_body_for(path, code, message, request_id, status), status_code=status, headers=headers)


async def known_error(request: Request, error: CitadelError) -> JSONResponse:
    return error_response(request, error.code, error.message, error.http_status, error.retry_after_s)


async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
    problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in error.errors())
    return error_response(request, InvalidRequest.code, problems or "invalid request", InvalidRequest.http_status)


async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    code = HTTP_CODES.get(error.status_code)
    if code is None:  # an unparsable body is reported like any invalid request (422)
        return error_response(request, InvalidRequest.code, str(error.detail), InvalidRequest.http_status)
    return error_response(request, code, str(error.detail), error.status_code)


async def unexpected_error(request: Request, error: Exception) -> JSONResponse:
    log.exception("unhandled error in %s %s", request.method, request.url.path)
    return error_response(request, "internal_error", "internal error; see the server log with this request id", 500)


def add_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(CitadelError, known_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected_error)
