"""`Citadel` (sync) and `AsyncCitadel` (asyncio): one method per public route of the API, over one
httpx connection pool each. The routes are `citadel/client/routes.py`; what may be retried and the
event stream's reader are `citadel/client/transport.py`.

    citadel = Citadel("http://127.0.0.1:8000", token=SERVICE_TOKEN, user_context=sign_for_alice)
    answer = citadel.answer("What is the hotel limit per night in London?")
    bob = citadel.with_user(sign_for_bob)            # the same pool, another signed-in user
    admin = Citadel(url, token=ADMIN_TOKEN)           # admin routes need the admin credential only
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any, AsyncIterator, Iterable, Iterator, Mapping, Optional, Self, Union

import httpx

from citadel.client import models as m
from citadel.client import routes
from citadel.client.errors import ApiError, RequestTimeout, StreamInterrupted, api_error
from citadel.client.transport import (Call, Credentials, EventCursor, EventReader, Retries, UserContext,
                                      base_headers, give_up, outcome, timeout_of, user_context_of)

DEFAULT_TIMEOUT_S = 60.0
# A run's event stream sends a keep-alive comment every ~10 s while the run is quiet.
STREAM_READ_TIMEOUT_S = 60.0
JOB_POLL_S = 0.25


class _Client:
    """What both clients hold: credentials, retries, timeouts, and whether they own their pool."""

    def __init__(self, token: Optional[str], user_context: UserContext, retries: Optional[Retries],
                 timeout: Union[float, httpx.Timeout], stream_read_timeout_s: float):
        self._credentials = Credentials(token, user_context_of(user_context))
        self._retries = retries or Retries()
        self._timeout = timeout_of(timeout)
        self._stream_timeout = httpx.Timeout(self._timeout.connect, read=stream_read_timeout_s)
        self._owns_http = True

    def with_user(self, user_context: UserContext) -> Self:
        """The same client (and connection pool) acting for another signed-in user; closing it
        leaves the pool to the original."""
        other = copy.copy(self)
        other._credentials = Credentials(self._credentials.token, user_context_of(user_context))
        other._owns_http = False
        return other

    def _reconnect_after(self, call: Call, cursor: EventCursor, failure: Exception) -> float:
        """How long to wait before reopening a run's event stream, or the error that ends it."""
        cursor.failures += 1
        wait_s = self._retries.reconnect_after(call, failure, cursor.failures)
        if wait_s is not None:
            return wait_s
        if isinstance(failure, ApiError):
            raise failure
        raise StreamInterrupted(f"the run's event stream dropped {cursor.failures} times in a row after seq "
                                f"{cursor.after_seq}: {failure}", cursor.after_seq) from failure

    def _request(self, call: Call) -> dict[str, Any]:
        return {"method": call.method, "url": call.path, "json": call.json, "params": call.params,
                "headers": self._credentials.headers(call)}


class Citadel(_Client):
    """The synchronous client. `token`: the calling service's bearer token (or an admin credential
    for the admin routes); `user_context`: the signed user context, or a callable signing a fresh
    one per request. `http`: an httpx.Client of your own (its base URL is used as given)."""

    def __init__(self, base_url: str = "", token: Optional[str] = None, *, user_context: UserContext = None,
                 retries: Optional[Retries] = None, timeout: Union[float, httpx.Timeout] = DEFAULT_TIMEOUT_S,
                 stream_read_timeout_s: float = STREAM_READ_TIMEOUT_S, headers: Optional[Mapping[str, str]] = None,
                 http: Optional[httpx.Client] = None):
        super().__init__(token, user_context, retries, timeout, stream_read_timeout_s)
        self._http = http or httpx.Client(base_url=base_url, timeout=self._timeout, headers=base_headers(headers))
        self._owns_http = http is None

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> "Citadel":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def send(self, call: Call) -> Any:
        """Send `call`, again where transport.Retries allows, and return its parsed result."""
        attempt = 0
        while True:
            attempt += 1
            try:
                result = outcome(call, self._http.request(**self._request(call)))
            except httpx.TransportError as error:
                result = error
            if not isinstance(result, Exception):
                return result
            wait_s = self._retries.resend_after(call, result, attempt)
            if wait_s is None:
                give_up(result)
            time.sleep(wait_s)

    # ------------------------------------------------------------------ health and query
    def health(self) -> m.Health:
        return self.send(routes.health())

    def retrieve(self, query: str, top_k: int = 8) -> m.RetrieveResult:
        """Passages the user may read, with their citations and scores."""
        return self.send(routes.retrieve(query, top_k))

    def answer(self, question: str) -> m.AnswerOrReview:
        """A cited answer (or refusal), or `ReviewPending` when a person must review it first."""
        return self.send(routes.answer(question))

    # ------------------------------------------------------------------ conversations and runs
    def create_conversation(self) -> m.Conversation:
        return self.send(routes.create_conversation())

    def delete_conversation(self, conversation_id: str) -> m.ConversationDeleted:
        return self.send(routes.delete_conversation(conversation_id))

    def delete_my_data(self) -> m.UserDataDeleted:
        return self.send(routes.delete_my_data())

    def post_message(self, conversation_id: str, content: str) -> m.RunStarted:
        """The user's message; it starts a run (follow it with `follow_run`)."""
        return self.send(routes.post_message(conversation_id, content))

    def ask_run(self, content: str) -> m.RunStarted:
        """A new conversation with one message: the run it started."""
        return self.post_message(self.create_conversation().conversation_id, content)

    def run(self, run_id: str) -> m.RunState:
        return self.send(routes.run(run_id))

    def cancel_run(self, run_id: str) -> m.CancelRequested:
        return self.send(routes.cancel_run(run_id))

    def run_events(self, run_id: str, after_seq: int = 0) -> list[m.RunEvent]:
        """The run's events recorded so far after `after_seq` (no waiting)."""
        return self.send(routes.run_events(run_id, after_seq))

    def follow_run(self, run_id: str, after_seq: int = 0, until: Iterable[str] = (),
                   timeout_s: Optional[float] = None) -> Iterator[m.RunEvent]:
        """The run's events after `after_seq` as they are recorded, each once and in order, until its
        final or error event (or one of the types in `until`). A dropped stream is reopened with
        `Last-Event-ID`, the last seq delivered; `StreamInterrupted` after `Retries.stream_reconnects`
        tries in a row that brought nothing. `timeout_s`: `RequestTimeout` if the stream has not ended
        by then (the server's keep-alive comments let the client look at the clock while a run is quiet)."""
        cursor = EventCursor(after_seq, tuple(until), timeout_s)
        while True:
            call = routes.run_event_stream(run_id, cursor.headers())
            try:
                with self._http.stream(call.method, call.path, headers=self._credentials.headers(call),
                                       timeout=self._stream_timeout) as response:
                    if response.status_code >= 400:
                        raise api_error(response.status_code, response.read(), response.headers)
                    reader = EventReader()
                    for line in response.iter_lines():
                        cursor.check_time(run_id)
                        event = reader.feed(line)
                        if cursor.take(event):
                            yield event
                            if cursor.ends(event):
                                return
                failure: Exception = httpx.RemoteProtocolError("the stream ended before the run's last event")
            except (httpx.TransportError, ApiError) as error:
                failure = error
            time.sleep(self._reconnect_after(call, cursor, failure))

    def feedback(self, answer_id: str, vote: str, reason: Optional[str] = None,
                 comment: str = "") -> m.FeedbackRecorded:
        """vote up | down; reason wrong_source | incomplete | outdated | other."""
        return self.send(routes.feedback(answer_id, vote, reason, comment))

    # ------------------------------------------------------------------ approvals
    def approvals(self, status: str = "pending") -> list[m.Approval]:
        """The approvals and review tasks one of the user's groups may decide."""
        return self.send(routes.approvals(status))

    def decide(self, approval_id: str, decision: str, edits: Optional[dict[str, Any]] = None,
               comment: str = "") -> m.Approval:
        """approve | edit_and_approve | reject (a review task: correct | request_info | reject); once."""
        return self.send(routes.decide(approval_id, decision, edits, comment))

    # ------------------------------------------------------------------ documents
    def section(self, document_id: str, version: int, chunk_id: str, quote: Optional[str] = None) -> m.Section:
        return self.send(routes.section(document_id, version, chunk_id, quote))

    def open_citation(self, citation: Union[m.Citation, str]) -> m.Section:
        """What a citation's `url` opens: the section, the quoted sentence marked (404 once the user
        may not read it)."""
        return self.send(routes.open_citation(citation))

    def raw_document(self, document_id: str, version: int) -> bytes:
        return self.send(routes.raw_document(document_id, version))

    def policy(self, policy_id: str) -> m.Policy:
        return self.send(routes.policy(policy_id))

    # ------------------------------------------------------------------ admin
    def upload_document(self, tenant_id: str, document_id: str, filename: str, *, text: Optional[str] = None,
                        content: Optional[bytes] = None, groups: Iterable[str] = (),
                        idempotency_key: Optional[str] = None, **fields: Any) -> m.JobStarted:
        """Queue an ingestion job for the document (`fields`: owner, status, effective_date,
        supersedes, policy_id, policy_revision, sensitivity, retention_class). Sent with an
        idempotency key (a fresh one unless given), so a retry never uploads twice."""
        return self.send(routes.upload_document(tenant_id, document_id, filename, text, content, groups, fields,
                                                idempotency_key))

    def job(self, job_id: str) -> m.Job:
        return self.send(routes.job(job_id))

    def wait_for_job(self, job_id: str, timeout_s: float = 120.0, poll_s: float = JOB_POLL_S) -> m.Job:
        """Poll the job until it is done; `RequestTimeout` if it is not within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not (job := self.job(job_id)).done:
            if time.monotonic() > deadline:
                raise RequestTimeout(f"job {job_id} is still {job.status} after {timeout_s:g} s")
            time.sleep(poll_s)
        return job

    def withdraw_document(self, tenant_id: str, document_id: str,
                          idempotency_key: Optional[str] = None) -> m.Withdrawn:
        return self.send(routes.withdraw_document(tenant_id, document_id, idempotency_key))

    def set_acl(self, tenant_id: str, document_id: str, groups: Iterable[str],
                idempotency_key: Optional[str] = None) -> m.AclSet:
        return self.send(routes.set_acl(tenant_id, document_id, groups, idempotency_key))

    def kept_prompt(self, request_id: str) -> m.KeptPrompt:
        return self.send(routes.kept_prompt(request_id))

    def tools(self) -> m.ToolPauses:
        return self.send(routes.tools())

    def pause_tool(self, target: str, tenant_id: Optional[str] = None) -> m.PauseState:
        return self.send(routes.pause_tool(target, tenant_id))

    def resume_tool(self, target: str, tenant_id: Optional[str] = None) -> m.PauseState:
        return self.send(routes.pause_tool(target, tenant_id, resume=True))

    def candidates(self, tenant_id: str, source: Optional[str] = None, status: str = "pending", limit: int = 100,
                   after_id: int = 0) -> m.CandidatePage:
        return self.send(routes.candidates(tenant_id, source, status, limit, after_id))

    def promote_candidate(self, candidate_id: int, label: dict[str, Any]) -> m.Candidate:
        return self.send(routes.promote_candidate(candidate_id, label))

    def dismiss_candidate(self, candidate_id: int) -> m.Candidate:
        return self.send(routes.dismiss_candidate(candidate_id))


class AsyncCitadel(_Client):
    """The asyncio client: the same methods as `Citadel`, awaited (`follow_run` is an async iterator)."""

    def __init__(self, base_url: str = "", token: Optional[str] = None, *, user_context: UserContext = None,
                 retries: Optional[Retries] = None, timeout: Union[float, httpx.Timeout] = DEFAULT_TIMEOUT_S,
                 stream_read_timeout_s: float = STREAM_READ_TIMEOUT_S, headers: Optional[Mapping[str, str]] = None,
                 http: Optional[httpx.AsyncClient] = None):
        super().__init__(token, user_context, retries, timeout, stream_read_timeout_s)
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=self._timeout,
                                               headers=base_headers(headers))
        self._owns_http = http is None

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> "AsyncCitadel":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()

    async def send(self, call: Call) -> Any:
        attempt = 0
        while True:
            attempt += 1
            try:
                result = outcome(call, await self._http.request(**self._request(call)))
            except httpx.TransportError as error:
                result = error
            if not isinstance(result, Exception):
                return result
            wait_s = self._retries.resend_after(call, result, attempt)
            if wait_s is None:
                give_up(result)
            await asyncio.sleep(wait_s)

    async def health(self) -> m.Health:
        return await self.send(routes.health())

    async def retrieve(self, query: str, top_k: int = 8) -> m.RetrieveResult:
        return await self.send(routes.retrieve(query, top_k))

    async def answer(self, question: str) -> m.AnswerOrReview:
        return await self.send(routes.answer(question))

    async def create_conversation(self) -> m.Conversation:
        return await self.send(routes.create_conversation())

    async def delete_conversation(self, conversation_id: str) -> m.ConversationDeleted:
        return await self.send(routes.delete_conversation(conversation_id))

    async def delete_my_data(self) -> m.UserDataDeleted:
        return await self.send(routes.delete_my_data())

    async def post_message(self, conversation_id: str, content: str) -> m.RunStarted:
        return await self.send(routes.post_message(conversation_id, content))

    async def ask_run(self, content: str) -> m.RunStarted:
        return await self.post_message((await self.create_conversation()).conversation_id, content)

    async def run(self, run_id: str) -> m.RunState:
        return await self.send(routes.run(run_id))

    async def cancel_run(self, run_id: str) -> m.CancelRequested:
        return await self.send(routes.cancel_run(run_id))

    async def run_events(self, run_id: str, after_seq: int = 0) -> list[m.RunEvent]:
        return await self.send(routes.run_events(run_id, after_seq))

    async def follow_run(self, run_id: str, after_seq: int = 0, until: Iterable[str] = (),
                         timeout_s: Optional[float] = None) -> AsyncIterator[m.RunEvent]:
        """As `Citadel.follow_run`."""
        cursor = EventCursor(after_seq, tuple(until), timeout_s)
        while True:
            call = routes.run_event_stream(run_id, cursor.headers())
            try:
                async with self._http.stream(call.method, call.path, headers=self._credentials.headers(call),
                                             timeout=self._stream_timeout) as response:
                    if response.status_code >= 400:
                        raise api_error(response.status_code, await response.aread(), response.headers)
                    reader = EventReader()
                    async for line in response.aiter_lines():
                        cursor.check_time(run_id)
                        event = reader.feed(line)
                        if cursor.take(event):
                            yield event
                            if cursor.ends(event):
                                return
                failure: Exception = httpx.RemoteProtocolError("the stream ended before the run's last event")
            except (httpx.TransportError, ApiError) as error:
                failure = error
            await asyncio.sleep(self._reconnect_after(call, cursor, failure))

    async def feedback(self, answer_id: str, vote: str, reason: Optional[str] = None,
                       comment: str = "") -> m.FeedbackRecorded:
        return await self.send(routes.feedback(answer_id, vote, reason, comment))

    async def approvals(self, status: str = "pending") -> list[m.Approval]:
        return await self.send(routes.approvals(status))

    async def decide(self, approval_id: str, decision: str, edits: Optional[dict[str, Any]] = None,
                     comment: str = "") -> m.Approval:
        return await self.send(routes.decide(approval_id, decision, edits, comment))

    async def section(self, document_id: str, version: int, chunk_id: str,
                      quote: Optional[str] = None) -> m.Section:
        return await self.send(routes.section(document_id, version, chunk_id, quote))

    async def open_citation(self, citation: Union[m.Citation, str]) -> m.Section:
        return await self.send(routes.open_citation(citation))

    async def raw_document(self, document_id: str, version: int) -> bytes:
        return await self.send(routes.raw_document(document_id, version))

    async def policy(self, policy_id: str) -> m.Policy:
        return await self.send(routes.policy(policy_id))

    async def upload_document(self, tenant_id: str, document_id: str, filename: str, *, text: Optional[str] = None,
                              content: Optional[bytes] = None, groups: Iterable[str] = (),
                              idempotency_key: Optional[str] = None, **fields: Any) -> m.JobStarted:
        return await self.send(routes.upload_document(tenant_id, document_id, filename, text, content, groups,
                                                      fields, idempotency_key))

    async def job(self, job_id: str) -> m.Job:
        return await self.send(routes.job(job_id))

    async def wait_for_job(self, job_id: str, timeout_s: float = 120.0, poll_s: float = JOB_POLL_S) -> m.Job:
        deadline = time.monotonic() + timeout_s
        while not (job := await self.job(job_id)).done:
            if time.monotonic() > deadline:
                raise RequestTimeout(f"job {job_id} is still {job.status} after {timeout_s:g} s")
            await asyncio.sleep(poll_s)
        return job

    async def withdraw_document(self, tenant_id: str, document_id: str,
                                idempotency_key: Optional[str] = None) -> m.Withdrawn:
        return await self.send(routes.withdraw_document(tenant_id, document_id, idempotency_key))

    async def set_acl(self, tenant_id: str, document_id: str, groups: Iterable[str],
                      idempotency_key: Optional[str] = None) -> m.AclSet:
        return await self.send(routes.set_acl(tenant_id, document_id, groups, idempotency_key))

    async def kept_prompt(self, request_id: str) -> m.KeptPrompt:
        return await self.send(routes.kept_prompt(request_id))

    async def tools(self) -> m.ToolPauses:
        return await self.send(routes.tools())

    async def pause_tool(self, target: str, tenant_id: Optional[str] = None) -> m.PauseState:
        return await self.send(routes.pause_tool(target, tenant_id))

    async def resume_tool(self, target: str, tenant_id: Optional[str] = None) -> m.PauseState:
        return await self.send(routes.pause_tool(target, tenant_id, resume=True))

    async def candidates(self, tenant_id: str, source: Optional[str] = None, status: str = "pending",
                         limit: int = 100, after_id: int = 0) -> m.CandidatePage:
        return await self.send(routes.candidates(tenant_id, source, status, limit, after_id))

    async def promote_candidate(self, candidate_id: int, label: dict[str, Any]) -> m.Candidate:
        return await self.send(routes.promote_candidate(candidate_id, label))

    async def dismiss_candidate(self, candidate_id: int) -> m.Candidate:
        return await self.send(routes.dismiss_candidate(candidate_id))
