"""The client's error tree: every failure the API reports (`{"error": {"code", "message",
"request_id"}}`) is raised as an `ApiError` subclass chosen by its code, else by its HTTP status,
mirroring the server's tree (citadel/errors.py) without importing it; a request that got no answer at
all is a `TransportError`.

    CitadelClientError
      TransportError              no response: connection refused, a timeout, a dropped stream
        ConnectionFailed
        RequestTimeout
        StreamInterrupted         a run's event stream dropped more often than the client reconnects
      ApiError                    .status .code .message .request_id .retry_after_s
        BadRequest 400, Unauthenticated 401, Forbidden 403, NotFound 404, Conflict 409,
        PayloadTooLarge 413, InvalidRequest 422, BudgetExhausted 429, ServerError 500,
        Unavailable 503 (Overloaded: code `overloaded`), DeadlineExceeded 504

Branch on the class for the family and on `code` for the finer reason (`expired_user_context`,
`idempotency_conflict`, ...): codes are stable, messages are for people.
"""

from __future__ import annotations

import json
from typing import Mapping, Optional


class CitadelClientError(Exception):
    """Anything the client raises."""


class TransportError(CitadelClientError):
    """The request got no response (after the retries it was allowed)."""


class ConnectionFailed(TransportError):
    pass


class RequestTimeout(TransportError):
    pass


class StreamInterrupted(TransportError):
    """A run's event stream kept dropping: `after_seq` is the last event delivered, to resume from."""

    def __init__(self, message: str, after_seq: int):
        super().__init__(message)
        self.after_seq = after_seq


class ApiError(CitadelClientError):
    """The API refused or failed the request with its JSON error body."""

    status = 0

    def __init__(self, status: int, code: str, message: str, request_id: str = "",
                 retry_after_s: Optional[float] = None):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.request_id = request_id
        self.retry_after_s = retry_after_s


class BadRequest(ApiError):
    status = 400


class Unauthenticated(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    """Absent, or outside the caller's scope: the API does not tell the two apart."""

    status = 404


class Conflict(ApiError):
    status = 409


class PayloadTooLarge(ApiError):
    status = 413


class InvalidRequest(ApiError):
    status = 422


class BudgetExhausted(ApiError):
    """A budget refused the request; `retry_after_s` says when it refills (not retried by the client)."""

    status = 429


class ServerError(ApiError):
    status = 500


class Unavailable(ApiError):
    status = 503


class Overloaded(Unavailable):
    """Shed before any work was done, so any request may be sent again after `retry_after_s`."""


class DeadlineExceeded(ApiError):
    status = 504


BY_STATUS: dict[int, type[ApiError]] = {cls.status: cls for cls in (
    BadRequest, Unauthenticated, Forbidden, NotFound, Conflict, PayloadTooLarge, InvalidRequest, BudgetExhausted,
    ServerError, Unavailable, DeadlineExceeded)}
BY_CODE: dict[str, type[ApiError]] = {"overloaded": Overloaded}
OVERLOADED = "overloaded"


def error_class(status: int, code: str) -> type[ApiError]:
    """The class for a code that has its own, else for the status, else the family of 4xx or 5xx."""
    if code in BY_CODE and BY_CODE[code].status == status:
        return BY_CODE[code]
    if status in BY_STATUS:
        return BY_STATUS[status]
    return ServerError if status >= 500 else ApiError


def api_error(status: int, body: bytes, headers: Mapping[str, str]) -> ApiError:
    """The error a non-2xx response stands for: the JSON error body when there is one, else the
    status alone (a proxy's HTML page, say) under the code `http_<status>`."""
    code, message, request_id = f"http_{status}", "", headers.get("x-request-id", "")
    try:
        detail = json.loads(body)["error"]
        code, message = str(detail["code"]), str(detail.get("message", ""))
        request_id = str(detail.get("request_id") or request_id)
    except (ValueError, KeyError, TypeError):
        message = body[:200].decode("utf-8", "replace")
    return error_class(status, code)(status, code, message, request_id, retry_after(headers))


def retry_after(headers: Mapping[str, str]) -> Optional[float]:
    """Retry-After in seconds (the API sends whole seconds; an HTTP date is not used by it)."""
    value = headers.get("retry-after", "").strip()
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None
