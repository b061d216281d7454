"""citadel.client against a live local deployment: the gateway served by uvicorn on 127.0.0.1 (one
module-scoped home with Acme ingested, hash embedder): every route family through the sync and the
async client, the error tree from the JSON error codes, retries only where a second send does no
second work, and a run's event stream resumed with Last-Event-ID after a dropped connection, every
event exactly once and in order. The LangChain retriever over it passes langchain-tests' standard
retriever tests here too (TestCitadelRetrieverStandard)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

import httpx
import pytest
from langchain_core.documents import Document
from langchain_tests.integration_tests import RetrieversIntegrationTests

from citadel.client import (AsyncCitadel, BudgetExhausted, Citadel, ConnectionFailed, InvalidRequest, NotFound,
                            Overloaded, Retries, RequestTimeout, StreamInterrupted, Unauthenticated, Unavailable)
from citadel.client.langchain import CitadelRetriever
from tests.integration.conftest import Home, make_home
from tests.integration.test_api import client_for
from tests.live_server import LiveServer

QUESTION = "What is the hotel limit per night in London?"
BUDGET_PER_DAY = 30  # requests one user may make per day here: the 429 test spends a user's whole budget
FAST = Retries(backoff_s=0.01, max_backoff_s=0.05)


@dataclass
class Deployment:
    home: Home
    url: str
    services: object

    def client(self, user: str = "alice", groups=("staff",), tenant: str = "acme", **options) -> Citadel:
        """A service acting for `user`: the context signed afresh for each request."""
        def sign() -> str:
            return self.home.user_context(tenant=tenant, user=user, groups=groups)
        return Citadel(self.url, token=self.home.service_token, user_context=sign, **{"retries": FAST, **options})

    def admin(self) -> Citadel:
        return Citadel(self.url, token=self.home.admin_token, retries=FAST)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    home = make_home(tmp_path_factory.mktemp("client") / "home",
                     CITADEL_STATE__BUDGET_REQUESTS_PER_DAY=str(BUDGET_PER_DAY))
    app = client_for(home).app
    with LiveServer(app) as server:
        yield Deployment(home, server.url, app.state.services)
    app.state.services.runs.wait_for_runs(60)
    app.state.services.admin.wait_for_jobs(30)


@pytest.fixture(scope="module")
def finished_run(live):
    """A run of QUESTION, finished, and its whole event log as the JSON route gives it."""
    with live.client() as citadel:
        run_id = citadel.ask_run(QUESTION).run_id
        live.services.runs.wait_for_runs(60)
        return run_id, citadel.run_events(run_id)


class Scripted(httpx.BaseTransport):
    """The real transport to the live server, except that the first requests whose path ends with
    `path_suffix` get the scripted failures instead (an httpx exception raised, or a status with a
    JSON error body returned); every request is recorded."""

    def __init__(self, path_suffix: str, failures: list):
        self._real, self._suffix, self._failures = httpx.HTTPTransport(), path_suffix, list(failures)
        self.requests: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path.endswith(self._suffix) and self._failures:
            failure = self._failures.pop(0)
            if isinstance(failure, Exception):
                raise failure
            status, code, headers = failure
            return httpx.Response(status, json={"error": {"code": code, "message": "scripted", "request_id": "r1"}},
                                  headers=headers)
        return self._real.handle_request(request)

    def close(self) -> None:
        self._real.close()


class Dropping(httpx.BaseTransport):
    """The real transport, except that the first event stream is cut after `events` whole events
    and a part of the next one, as a dropped connection would be (httpx.ReadError mid-stream)."""

    def __init__(self, events: int):
        self._real, self._events, self._dropped = httpx.HTTPTransport(), events, False
        self.streams: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._real.handle_request(request)
        if not request.url.path.endswith("/events"):
            return response
        self.streams.append(request)
        if self._dropped:
            return response
        self._dropped = True
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=CutStream(response.stream, self._events), request=request)

    def close(self) -> None:
        self._real.close()


class CutStream(httpx.SyncByteStream):
    def __init__(self, inner, events: int):
        self._inner, self._events = inner, events

    def __iter__(self):
        buffer = b""
        for chunk in self._inner:
            buffer += chunk
            blocks = buffer.split(b"\n\n")
            whole = [b for b in blocks[:-1] if not b.startswith(b":")]
            if len(whole) > self._events:
                kept = b"\n\n".join(blocks[:self._events_index(blocks)]) + b"\n\n"
                yield kept + blocks[self._events_index(blocks)][:20]  # half of the next event, then the drop
                raise httpx.ReadError("connection reset by peer")
        yield buffer

    def _events_index(self, blocks: list[bytes]) -> int:
        seen = 0
        for index, block in enumerate(blocks):
            seen += not block.startswith(b":")
            if seen > self._events:
                return index
        return len(blocks)

    def close(self) -> None:
        self._inner.close()


# ---------------------------------------------------------------------- the route families
def test_health_retrieve_and_answer_with_citations_that_open(live):
    with live.client() as alice:
        assert alice.health().status == "ok"
        found = alice.retrieve("hotel limit per night", top_k=3)
        assert 0 < len(found.passages) <= 3 and found.request_id
        assert all(p.document_id and p.chunk_id and p.url and p.text for p in found.passages)
        answer = alice.answer(QUESTION)
        assert answer.outcome == "answered" and answer.citations and not answer.refused
        cited = answer.citations[0]
        section = alice.open_citation(cited)
        assert (section.document_id, section.version, section.chunk_id) == (cited.document_id, cited.version,
                                                                          cited.chunk_id)
        assert "<<" in section.marked_text and section.heading
        assert alice.section(cited.document_id, cited.version, cited.chunk_id).text == section.text
        with live.client(tenant="northwind", user="sam", groups=("sales",)) as outsider:
            with pytest.raises(NotFound) as denied:
                outsider.open_citation(cited.url)
        assert denied.value.code == "not_found" and denied.value.request_id
        with pytest.raises(ValueError):
            alice.open_citation("https://elsewhere.example/v1/documents/x/versions/1/sections/y")
        with pytest.raises(NotFound):
            alice.policy("no-such-policy")


def test_a_run_followed_over_its_event_stream_matches_its_log(live, finished_run):
    run_id, logged = finished_run
    with live.client() as alice:
        followed = list(alice.follow_run(run_id))
        assert followed == logged and followed[-1].type == "final"
        assert [e.seq for e in followed] == list(range(1, len(followed) + 1))
        assert list(alice.follow_run(run_id, after_seq=3)) == logged[3:]
        with pytest.raises(RequestTimeout):
            list(alice.follow_run(run_id, timeout_s=0))
        state = alice.run(run_id)
        assert state.status == "succeeded" and state.outcome == "answered" and state.steps
        assert alice.cancel_run(run_id).cancel_requested
        answer_id = followed[-1].data.get("answer_id")
        if answer_id:
            recorded = alice.feedback(answer_id, "up")
            assert recorded.answer_id == answer_id and recorded.sources
    with live.client(user="leaver") as leaver:
        conversation = leaver.create_conversation().conversation_id
        assert leaver.delete_conversation(conversation).deleted
        with pytest.raises(NotFound):
            leaver.post_message(conversation, QUESTION)
        assert leaver.delete_my_data().user_id == "leaver"


def test_a_dropped_stream_resumes_from_the_last_event_id_without_a_lost_or_repeated_event(live, finished_run):
    run_id, logged = finished_run
    cut = 3
    assert len(logged) > cut + 1
    transport = Dropping(events=cut)
    with live.client(http=httpx.Client(base_url=live.url, transport=transport)) as alice:
        followed = list(alice.follow_run(run_id))
    assert followed == logged  # every event once, in order, across the drop (the half event was not delivered)
    first, second = transport.streams
    assert "last-event-id" not in first.headers and second.headers["last-event-id"] == str(cut)


def test_a_stream_that_keeps_dropping_says_where_it_stopped(live, finished_run):
    run_id, _ = finished_run
    failures = [httpx.ReadError("reset")] * 10
    transport = Scripted("/events", failures)
    retries = Retries(backoff_s=0.001, max_backoff_s=0.001, stream_reconnects=2)
    with live.client(http=httpx.Client(base_url=live.url, transport=transport), retries=retries) as alice:
        with pytest.raises(StreamInterrupted) as interrupted:
            list(alice.follow_run(run_id, after_seq=2))
    assert interrupted.value.after_seq == 2 and len(transport.requests) == 3


def test_the_async_client_follows_a_run_and_retrieves(live):
    async def scenario():
        sign = lambda: live.home.user_context(user="alice")  # noqa: E731
        async with AsyncCitadel(live.url, token=live.home.service_token, user_context=sign, retries=FAST) as alice:
            started = await alice.ask_run(QUESTION)
            events = [event async for event in alice.follow_run(started.run_id)]
            found = await alice.retrieve("hotel limit", top_k=2)
            with pytest.raises(NotFound):
                await alice.run("no-such-run")
            return events, found, await alice.run_events(started.run_id)

    events, found, logged = asyncio.run(scenario())
    assert events == logged and events[-1].type == "final" and events[-1].data["citations"]
    assert 0 < len(found.passages) <= 2


def test_approvals_are_listed_and_an_unknown_one_is_not_found(live):
    with live.client(groups=("staff", "deal-desk")) as reviewer:
        assert reviewer.approvals() == []
        with pytest.raises(NotFound):
            reviewer.decide("no-such-approval", "approve")


def test_admin_upload_job_acl_raw_file_and_withdrawal(live):
    text = "# Client notes\n\n## Badges\n\nVisitor badges at Acme are collected from the east lobby desk.\n"
    with live.admin() as admin, live.client() as alice:
        started = admin.upload_document("acme", "client-notes", "client-notes.md", text=text, groups=["staff"],
                                        owner="ops@acme.example", idempotency_key="client-notes-1")
        assert started.job_id and started.status == "queued"
        replay = admin.upload_document("acme", "client-notes", "client-notes.md", text=text, groups=["staff"],
                                       owner="ops@acme.example", idempotency_key="client-notes-1")
        assert replay.job_id == started.job_id  # the key ran once
        job = admin.wait_for_job(started.job_id, timeout_s=60)
        assert job.status == "succeeded" and job.document_id == "client-notes" and job.version == started.version
        assert alice.raw_document("client-notes", job.version) == text.encode()
        assert any(p.document_id == "client-notes" for p in alice.retrieve("visitor badges east lobby").passages)
        acl = admin.set_acl("acme", "client-notes", ["exec"])
        assert acl.groups == ["exec"] and acl.acl_version >= 1
        assert all(p.document_id != "client-notes" for p in alice.retrieve("visitor badges east lobby").passages)
        assert admin.withdraw_document("acme", "client-notes").status == "withdrawn"
        assert "model" in admin.tools().targets
        assert admin.pause_tool("model", "acme").paused and not admin.resume_tool("model", "acme").paused
        with pytest.raises(NotFound):
            admin.job("no-such-job")


# ---------------------------------------------------------------------- errors and retries
def test_errors_map_to_the_client_error_tree(live):
    with Citadel(live.url, token="not-a-credential", user_context=live.home.user_context()) as stranger:
        with pytest.raises(Unauthenticated) as unauthenticated:
            stranger.retrieve("hotel")
    assert unauthenticated.value.status == 401 and unauthenticated.value.code and unauthenticated.value.request_id
    with live.client() as alice:
        with pytest.raises(InvalidRequest) as invalid:
            alice.retrieve("")
        assert invalid.value.status == 422 and invalid.value.code == "invalid_request" and "query" in invalid.value.message
        with pytest.raises(NotFound):
            alice.run("no-such-run")


def test_an_exhausted_budget_is_429_with_retry_after_and_is_not_retried(live):
    transport = Scripted("/never", [])
    with live.client(user="spender", http=httpx.Client(base_url=live.url, transport=transport)) as spender:
        for _ in range(BUDGET_PER_DAY):
            spender.retrieve("hotel", top_k=1)
        with pytest.raises(BudgetExhausted) as refused:
            spender.retrieve("hotel", top_k=1)
    assert refused.value.code == "budget_exhausted" and refused.value.retry_after_s >= 1
    assert len(transport.requests) == BUDGET_PER_DAY + 1


def test_a_get_is_retried_after_a_503_and_a_query_is_not(live, finished_run):
    run_id, _ = finished_run
    transport = Scripted(f"/runs/{run_id}", [(503, "unavailable", {})])
    with live.client(http=httpx.Client(base_url=live.url, transport=transport)) as alice:
        assert alice.run(run_id).run_id == run_id
    assert len(transport.requests) == 2
    transport = Scripted("/v1/retrieve", [(503, "unavailable", {})])
    with live.client(http=httpx.Client(base_url=live.url, transport=transport)) as alice:
        with pytest.raises(Unavailable):
            alice.retrieve("hotel")
    assert len(transport.requests) == 1


def test_a_shed_request_and_a_connection_never_opened_are_sent_again(live):
    shed = [(503, "overloaded", {"retry-after": "0"}), httpx.ConnectError("refused")]
    transport = Scripted("/v1/retrieve", shed)
    with live.client(http=httpx.Client(base_url=live.url, transport=transport)) as alice:
        assert alice.retrieve("hotel", top_k=1).passages
    assert len(transport.requests) == 3
    transport = Scripted("/v1/retrieve", [(503, "overloaded", {"retry-after": "0"})] * 3)
    with live.client(http=httpx.Client(base_url=live.url, transport=transport)) as alice:
        with pytest.raises(Overloaded) as overloaded:
            alice.retrieve("hotel")
    assert isinstance(overloaded.value, Unavailable) and len(transport.requests) == 3


def test_a_timed_out_get_is_retried_then_raised_and_a_dead_server_is_connection_failed(live, finished_run):
    run_id, _ = finished_run
    transport = Scripted(f"/runs/{run_id}", [httpx.ReadTimeout("slow")] * 3)
    with live.client(http=httpx.Client(base_url=live.url, transport=transport)) as alice:
        with pytest.raises(RequestTimeout):
            alice.run(run_id)
    assert len(transport.requests) == 3
    transport = Scripted("/messages", [httpx.ReadTimeout("slow")])
    with live.client(http=httpx.Client(base_url=live.url, transport=transport)) as alice:
        with pytest.raises(RequestTimeout):
            alice.ask_run(QUESTION)  # a message is never sent twice: the API takes no idempotency key for it
    assert len(transport.requests) == 2  # the conversation, then the message once
    with Citadel("http://127.0.0.1:9", token="t", retries=FAST) as nowhere:
        with pytest.raises(ConnectionFailed):
            nowhere.health()


def test_an_admin_write_retried_after_a_lost_response_runs_once(live):
    transport = Scripted("/acl", [httpx.ReadError("reset")])
    http = httpx.Client(base_url=live.url, transport=transport)
    with Citadel(token=live.home.admin_token, retries=FAST, http=http) as admin:
        first = admin.set_acl("acme", "expense-policy", ["staff", "exec"])
    keys = {r.headers["idempotency-key"] for r in transport.requests}
    assert len(transport.requests) == 2 and len(keys) == 1 and first.groups == ["exec", "staff"]
    http.close()


def test_a_signer_signs_each_request_and_with_user_shares_the_pool(live):
    signed = []
    lock = threading.Lock()

    def sign(user: str):
        def signer() -> str:
            with lock:
                signed.append(user)
            return live.home.user_context(user=user)
        return signer

    with Citadel(live.url, token=live.home.service_token, user_context=sign("alice"), retries=FAST) as alice:
        bob = alice.with_user(sign("bob"))
        assert alice.retrieve("hotel", top_k=1).passages and bob.retrieve("hotel", top_k=1).passages
        bob.close()  # leaves the pool to alice
        assert alice.retrieve("hotel", top_k=1).passages
    assert signed == ["alice", "bob", "alice"]


# ---------------------------------------------------------------------- LangChain
class TestCitadelRetrieverStandard(RetrieversIntegrationTests):
    """langchain-tests' standard retriever tests, against the live deployment."""

    @pytest.fixture(autouse=True)
    def _deployment(self, live):
        self._live = live

    @property
    def retriever_constructor(self) -> type[CitadelRetriever]:
        return CitadelRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"client": self._live.client(user="reader"), "k": 4}

    @property
    def retriever_query_example(self) -> str:
        return "hotel limit per night"


def test_the_retriever_returns_documents_with_their_citations(live):
    async_client = AsyncCitadel(live.url, token=live.home.service_token,
                                user_context=live.home.user_context(user="reader"))
    retriever = CitadelRetriever(client=live.client(user="reader"), async_client=async_client, k=2)
    documents = retriever.invoke(QUESTION)
    assert len(documents) == 2 and all(isinstance(d, Document) for d in documents)
    passages = live.client(user="reader").retrieve(QUESTION, top_k=2).passages
    for document, passage in zip(documents, passages):
        assert document.page_content == passage.text and document.id == passage.chunk_id
        assert {k: document.metadata[k] for k in ("document_id", "version", "heading", "page", "chunk_id", "url")} \
            == {"document_id": passage.document_id, "version": passage.version, "heading": passage.heading,
                "page": passage.page, "chunk_id": passage.chunk_id, "url": passage.url}
        assert document.metadata["score"] == pytest.approx(passage.score)
    assert [d.id for d in asyncio.run(retriever.ainvoke(QUESTION, k=1))] == [documents[0].id]
    with pytest.raises(ValueError):
        retriever.invoke(QUESTION, k=0)
