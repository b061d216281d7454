"""Admission: what happens to an HTTP request before any route (or FastAPI's body parser) sees it.

An ASGI middleware, because FastAPI reads and parses a route's body before it resolves the route's
header dependencies: a route cannot refuse an anonymous 50 MB body unread. In order:
1. **Request ids.** Every request gets a fresh server id (uuid4 hex): the answer log's key, the
   spans', the `x-request-id` response header's. A client's own `x-request-id`, when it is a plain
   token, is kept only as a correlation id (`x-correlation-id` in the response, a field in the log):
   it names nothing and can overwrite nothing.
2. **Authentication from headers alone**, before one byte of the body is read: a matched route under
   `/v1/admin/` needs an admin credential; any other matched `/v1/` route (present or added later) and the
   MCP endpoint `/mcp` a service credential and a user context. The verified caller waits in `request.state.caller`
   (an admin in `request.state.admin`), so routes do not verify it again.
   Public paths (health, metrics — which checks its own credential —, the OpenAPI documents) and
   unmatched paths (404) need none.
3. **Body limits while reading**: a declared Content-Length over the route's limit is refused at
   once; otherwise bytes are counted as they arrive and reading stops at the limit (413
   `payload_too_large`). Uploads may carry `serving.max_upload_bytes` as base64 (4/3) plus an
   envelope; every other route `serving.max_body_bytes`. The body read so far is then replayed to
   the app, which never sees more than the limit.
4. **Load shedding**: a user request that does work (a POST under `/v1/`, admin routes aside) takes one
   of `serving.admission_max_in_flight` slots of this replica for its whole life, or waits for one
   (at most `admission_max_waiting` wait, each at most `admission_max_wait_s`); beyond that it is
   refused at once with 503 `overloaded` and `Retry-After` — before steps 2 and 3, so that a refusal
   costs the replica next to nothing (it reveals nothing either). Past its peak a replica serves fewer
   answers per second when given more at once (each holds a worker thread across its hops, and the
   processes fight for the cores), so the excess waits or is refused instead of joining.
"""

from __future__ import annotations

import asyncio
import math
import re
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional

from starlette.responses import JSONResponse
from starlette.routing import Match

from citadel.errors import CitadelError, Overloaded, PayloadTooLarge
from serving.http.errors import REQUEST_ID_HEADER, error_body_for, retry_after

CORRELATION_ID_HEADER = "x-correlation-id"
# A client's correlation id is kept only when it is a plain token (full match: no trailing newline).
CORRELATION_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
ADMIN_PREFIX = "/v1/admin/"
MCP_PATH = "/mcp"  # the MCP server (serving/http/mcp.py): a user's tools, authenticated and shed like /v1/
API_PREFIX = "/v1/"
UPLOAD_PATH = re.compile(r"/v1/admin/tenants/[^/]+/documents/?")
BASE64_GROWTH = 4 / 3

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True)
class RequestIds:
    request_id: str
    correlation_id: Optional[str]

    @classmethod
    def of(cls, headers: dict[str, str]) -> "RequestIds":
        given = headers.get(REQUEST_ID_HEADER, "")
        return cls(uuid.uuid4().hex, given if CORRELATION_ID_PATTERN.fullmatch(given) else None)

    def headers(self) -> list[tuple[bytes, bytes]]:
        pairs = [(REQUEST_ID_HEADER.encode(), self.request_id.encode())]
        if self.correlation_id is not None:
            pairs.append((CORRELATION_ID_HEADER.encode(), self.correlation_id.encode()))
        return pairs


def body_limit(method: str, path: str, serving) -> int:
    """Bytes a request body may have on this route (serving: the `serving` config section)."""
    if method == "POST" and UPLOAD_PATH.fullmatch(path):
        return math.ceil(serving.max_upload_bytes * BASE64_GROWTH) + serving.max_body_bytes
    return serving.max_body_bytes


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"the request body is over this route's limit of {limit:,} bytes")


class Shedder:
    """At most `max_in_flight` admitted at once; up to `max_waiting` more wait, each up to `max_wait_s`
    for a slot (first come, first served); anything beyond is refused at once. One per replica: its
    event loop is the only one that touches it."""

    def __init__(self, max_in_flight: int, max_waiting: int, max_wait_s: float, retry_after_s: int):
        self._slots = asyncio.Semaphore(max_in_flight)
        self._max_waiting = max_waiting
        self._max_wait_s = max_wait_s
        self._retry_after_s = retry_after_s
        self.waiting = 0
        self.shed = 0  # refused since the replica started (the metrics' counter reads it)

    @classmethod
    def of(cls, serving) -> "Shedder":
        """From the `serving` config section."""
        return cls(serving.admission_max_in_flight, serving.admission_max_waiting, serving.admission_max_wait_s,
                   serving.admission_retry_after_s)

    def refuse_when_full(self) -> None:
        """Overloaded at once when every slot is taken and the wait is full: checked before the request
        is authenticated or its body read, so a refusal costs the replica next to nothing."""
        if self._slots.locked() and self.waiting >= self._max_waiting:
            raise self._refused()

    async def acquire(self) -> None:
        """A slot, or Overloaded (with its Retry-After) when none frees in time or too many wait."""
        if not self._slots.locked():
            await self._slots.acquire()
            return
        self.refuse_when_full()
        self.waiting += 1
        try:
            await asyncio.wait_for(self._slots.acquire(), self._max_wait_s)
        except asyncio.TimeoutError:
            raise self._refused() from None
        finally:
            self.waiting -= 1

    def release(self) -> None:
        self._slots.release()

    def _refused(self) -> Overloaded:
        self.shed += 1
        return Overloaded("the gateway has more requests than it can serve now; retry after the delay in "
                          "Retry-After", retry_after_s=self._retry_after_s)


def sheds(scope: Scope, needs: Optional[str]) -> bool:
    """Whether this request takes a slot: a user's POST (answers, retrievals, run messages)."""
    return needs == "user" and scope["method"] == "POST"


class Admission:
    """The ASGI middleware. `services_of(scope)` finds the serving services (None while they start)."""

    def __init__(self, app, services_of: Callable[[Scope], Any]):
        self.app = app
        self._services_of = services_of
        self._shedder: Optional[Shedder] = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        ids = RequestIds.of(headers)
        state = scope.setdefault("state", {})
        state["request_id"], state["correlation_id"] = ids.request_id, ids.correlation_id
        send = _adding_headers(send, ids.headers())
        needs = _credential_needed(scope)
        shedder = self._shedder_of(scope) if sheds(scope, needs) else None
        try:
            if shedder is not None:
                shedder.refuse_when_full()
            self._authenticate(scope, needs, headers, state)
            body = await self._read_body(scope, headers, receive)
            if shedder is not None:
                await shedder.acquire()
        except CitadelError as error:
            await _error_response(error, ids.request_id, scope["path"])(scope, receive, send)
            return
        try:
            await self.app(scope, _replaying(body, receive), send)
        finally:
            if shedder is not None:
                shedder.release()

    def _shedder_of(self, scope: Scope) -> Optional[Shedder]:
        """This replica's shedder, made from config once the services are up (None before)."""
        if self._shedder is None:
            services = self._services_of(scope)
            if services is not None:
                self._shedder = Shedder.of(services.config.serving)
        return self._shedder

    def _authenticate(self, scope: Scope, needs: Optional[str], headers: dict[str, str], state: dict) -> None:
        if needs is None:
            return
        services = self._services_of(scope)
        if services is None:
            raise Overloaded("the gateway is still starting")
        if needs == "admin":
            state["admin"] = services.access.admin(headers.get("authorization"))
        else:
            state["caller"] = services.access.caller(headers.get("authorization"),
                                                     headers.get("x-citadel-user-context"))

    async def _read_body(self, scope: Scope, headers: dict[str, str], receive: Receive) -> bytes:
        """The whole body, read while counting: never more than the route's limit."""
        services = self._services_of(scope)
        if services is None:  # public paths while starting: the smallest limit there is
            limit = 1024
        else:
            limit = body_limit(scope["method"], scope["path"], services.config.serving)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away; the app sees an empty body
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _error_response(error: CitadelError, request_id: str, path: str) -> JSONResponse:
    """The route family's error body (OpenAI's shape on the OpenAI-compatible paths)."""
    body = error_body_for(path, error.code, error.message, request_id, error.http_status)
    return JSONResponse(body, status_code=error.http_status, headers=retry_after(error.retry_after_s))


def _credential_needed(scope: Scope) -> Optional[str]:
    """"admin", "user" or None for this request's route (None also when no route matches: 404)."""
    path = scope["path"]
    if not path.startswith(API_PREFIX) and path != MCP_PATH:
        return None
    router = getattr(scope.get("app"), "router", None)
    routes = getattr(router, "routes", None)
    if routes is not None and not any(route.matches(scope)[0] == Match.FULL for route in routes):
        return None
    return "admin" if path.startswith(ADMIN_PREFIX) else "user"


def _headers(scope: Scope) -> dict[str, str]:
    """Header names lower-cased (ASGI already does), latin-1 values; the first of a repeated name."""
    found: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        found.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return found


def _adding_headers(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    names = {name for name, _ in extra}

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            kept = [(n, v) for n, v in message.get("headers", []) if n.lower() not in names]
            message = {**message, "headers": [*kept, *extra]}
        await send(message)

    return sending


def _replaying(body: bytes, receive: Receive) -> Receive:
    """The body already read, as one message; then the client's further messages (a disconnect)."""
    sent = False

    async def receiving() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receiving
