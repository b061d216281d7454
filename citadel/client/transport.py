"""What the sync and the async client share, none of it doing I/O: a request as data (`Call`), the
credentials each request carries (`Credentials`), when a failed request may be sent again and after
how long (`Retries`), and the Server-Sent Events reader of a run's event stream (`EventReader`).

Retries only where a second send cannot do the work twice:
- a GET (idempotent), or a write carrying an `Idempotency-Key` (the admin writes: the server runs each
  key once and answers a replay with the first response): after a transport failure, 502, 503 or 504;
- any request refused before it reached a route: a connection that never opened, or 503 `overloaded`
  (admission sheds before any work is done);
never a 4xx: `BudgetExhausted` (429) and its `retry_after_s` are the caller's to act on.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NoReturn, Optional, Union

import httpx

from citadel.client.errors import (OVERLOADED, ApiError, ConnectionFailed, RequestTimeout, TransportError,
                                   api_error)
from citadel.client.models import RunEvent

USER_CONTEXT_HEADER = "x-citadel-user-context"
# A user context: the signed JWT itself, or a callable that signs a fresh one for each request
# (citadel.identity.context.sign_user_context with the calling service's key, say).
UserContext = Union[str, Callable[[], str], None]
RESENDABLE_STATUSES = frozenset({502, 503, 504})
# Failures where the request never reached the server: safe to send again whatever it does.
NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class Call:
    """One API request and how to read its success. `idempotent`: a second send does no second work."""

    method: str
    path: str
    parse: Callable[[httpx.Response], Any]
    json: Any = None
    params: Optional[dict[str, Any]] = None
    headers: dict[str, str] = field(default_factory=dict)
    idempotent: bool = False
    as_user: bool = True  # sends the user context (admin routes and /healthz need none)


@dataclass(frozen=True)
class Credentials:
    """The service's (or admin's) bearer token and, for user routes, the signed user context."""

    token: Optional[str]
    user_context: UserContext = None

    def headers(self, call: Call) -> dict[str, str]:
        headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
        if call.as_user and self.user_context is not None:  # a signer is asked only when a context is sent
            context = self.user_context() if callable(self.user_context) else self.user_context
            headers[USER_CONTEXT_HEADER] = context
        return {**headers, **call.headers}


@dataclass(frozen=True)
class Retries:
    """How often and after how long a failed request is sent again (see the module's rules)."""

    max_attempts: int = 3          # sends of one request, the first included
    backoff_s: float = 0.25        # the first wait; doubled each time, with jitter
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 30.0  # a longer Retry-After is not waited out: the error is raised
    stream_reconnects: int = 5     # a run's event stream reconnects this often without receiving an event

    def wait_s(self, attempt: int, retry_after_s: Optional[float] = None) -> float:
        """How long to wait before send number `attempt + 1` (Retry-After when the server said)."""
        if retry_after_s is not None:
            return retry_after_s
        return min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)

    def resend_after(self, call: Call, failure: Exception, attempt: int) -> Optional[float]:
        """Seconds to wait before sending `call` again after `failure` on send `attempt`; None: give up."""
        return self._after(call, failure, attempt) if attempt < self.max_attempts else None

    def reconnect_after(self, call: Call, failure: Exception, failures: int) -> Optional[float]:
        """Seconds to wait before reopening an event stream after `failures` in a row; None: give up."""
        return self._after(call, failure, failures) if failures <= self.stream_reconnects else None

    def _after(self, call: Call, failure: Exception, attempt: int) -> Optional[float]:
        if not may_resend(call, failure):
            return None
        retry_after_s = failure.retry_after_s if isinstance(failure, ApiError) else None
        if retry_after_s is not None and retry_after_s > self.max_retry_after_s:
            return None
        return self.wait_s(attempt, retry_after_s)


def may_resend(call: Call, failure: Exception) -> bool:
    if isinstance(failure, NEVER_SENT) or (isinstance(failure, ApiError) and failure.code == OVERLOADED):
        return True
    if not call.idempotent:
        return False
    return isinstance(failure, httpx.TransportError) or (isinstance(failure, ApiError)
                                                          and failure.status in RESENDABLE_STATUSES)


def outcome(call: Call, response: httpx.Response) -> Any:
    """The parsed result of a response that has been read, or its ApiError (returned, not raised)."""
    if response.status_code >= 400:
        return api_error(response.status_code, response.content, response.headers)
    return call.parse(response)


def give_up(failure: Exception) -> NoReturn:
    """Raise what the caller sees for a failure the retries did not overcome: an ApiError as it is,
    an httpx transport failure as the client's TransportError."""
    if isinstance(failure, (httpx.ConnectError, httpx.ConnectTimeout)):
        raise ConnectionFailed(f"could not connect: {failure}") from failure
    if isinstance(failure, httpx.TimeoutException):
        raise RequestTimeout(f"no response in time: {failure}") from failure
    if isinstance(failure, httpx.TransportError):
        raise TransportError(f"the request failed: {failure}") from failure
    raise failure


def timeout_of(timeout: Union[float, httpx.Timeout]) -> httpx.Timeout:
    return timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout, connect=min(timeout, 10.0))


def user_context_of(user_context: UserContext) -> UserContext:
    if user_context is not None and not (isinstance(user_context, str) or callable(user_context)):
        raise TypeError("user_context is a signed context (str) or a callable that returns one")
    return user_context


def base_headers(headers: Optional[Mapping[str, str]]) -> dict[str, str]:
    return {"user-agent": "citadel-client", **(headers or {})}


class EventReader:
    """Server-Sent Events, line by line, as run events: `feed` returns the event a blank line
    completes. A comment (`: keep-alive`) is skipped; an event cut off mid-way is never returned."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> Optional[RunEvent]:
        if line == "":
            data, self._data = self._data, []
            return RunEvent.parse(json.loads("\n".join(data))) if data else None
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None  # `id:` repeats the data's seq and `event:` its type


class EventCursor:
    """Where a client following a run's events is: the last seq delivered (each event once, in
    order, across reconnects) and how many reconnects in a row brought nothing."""

    def __init__(self, after_seq: int, until: tuple[str, ...], timeout_s: Optional[float] = None):
        self.after_seq, self.until = after_seq, until
        self.failures = 0
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s

    def check_time(self, run_id: str) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise RequestTimeout(f"run {run_id} sent no final event in time (the last was seq {self.after_seq})")

    def headers(self) -> dict[str, str]:
        headers = {"accept": "text/event-stream"}
        if self.after_seq:
            headers["last-event-id"] = str(self.after_seq)
        return headers

    def take(self, event: Optional[RunEvent]) -> bool:
        """Whether `event` is new (then it is delivered and the cursor moves past it)."""
        if event is None or event.seq <= self.after_seq:
            return False
        self.after_seq, self.failures = event.seq, 0
        return True

    def ends(self, event: RunEvent) -> bool:
        """The stream ends after a terminal event (the server closes it) or one the caller waits for."""
        return event.terminal or event.type in self.until
