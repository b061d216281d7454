"""The MCP server at /mcp (serving/http/mcp.py), driven by the official `mcp` client over Streamable HTTP
against a live deployment: the gateway served by uvicorn on a free loopback port, its lifespan running
the session manager, over a home with Acme ingested and the CRM's tools on loopback. One deployment
for the module; each call opens its own client session (the server keeps none)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from examples.crm.__main__ import db_path
from examples.crm.store import CrmStore
from tests.integration.conftest import make_home
from tests.integration.tool_servers import tool_servers
from tests.live_server import LiveServer

REPO = Path(__file__).resolve().parents[2]
SAM = {"tenant": "northwind", "user": "sam", "groups": ("sales",)}
BARE_ACTION = "Propose a 5% discount for 24 months for acme."
TOOL_NAMES = {"search", "answer", "open_citation", "start_run", "run_events"}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    from serving.http.api import create_api
    from serving.services.compose import build_services

    home = make_home(tmp_path_factory.mktemp("mcp") / "home",
                     CITADEL_TOOLS__REGISTRY_FILE=str(REPO / "examples" / "crm" / "tools.yaml"))
    with tool_servers(home.config):
        app = create_api()
        app.state.services = build_services(home.config)
        app.state.executor = concurrent.futures.ThreadPoolExecutor(4)
        with LiveServer(app, lifespan="on") as server:
            yield home, server, app.state.services
            app.state.services.runs.wait_for_runs(60)
        app.state.executor.shutdown()


@contextlib.asynccontextmanager
async def session_for(url: str, headers: dict, era: str = "handshake"):
    """A client session; `era`: "handshake" (initialize, protocol revisions up to 2025-11-25) or
    "modern" (server/discover, 2026-07-28: every request on its own)."""
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with streamable_http_client(f"{url}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await (session.initialize() if era == "handshake" else session.discover())
                yield session


def run_session(url: str, headers: dict, work, era: str = "handshake"):
    """`work(session)` in a fresh MCP session as the caller `headers` name."""
    async def main():
        async with session_for(url, headers, era) as session:
            return await work(session)
    return anyio.run(main)


def call(url: str, headers: dict, name: str, arguments: dict):
    return run_session(url, headers, lambda session: session.call_tool(name, arguments))


def body_of(result) -> dict:
    assert not result.is_error, result.content
    [text] = result.content
    assert json.loads(text.text) == result.structured_content
    return result.structured_content


def error_of(result) -> dict:
    assert result.is_error
    return json.loads(result.content[0].text)["error"]


@pytest.mark.parametrize("era", ["handshake", "modern"])
def test_the_tools_are_listed_with_their_argument_schemas(deployment, era):
    home, server, _ = deployment
    tools = run_session(server.url, home.headers(), lambda session: session.list_tools(), era).tools
    assert {tool.name for tool in tools} == TOOL_NAMES
    search = next(tool for tool in tools if tool.name == "search")
    assert search.input_schema["required"] == ["query"] and search.annotations.read_only_hint


def test_search_answer_and_open_citation_carry_the_same_citations_as_the_json_api(deployment):
    home, server, _ = deployment
    passages = body_of(call(server.url, home.headers(), "search", {"query": "hotel limit per night", "top_k": 3}))
    assert 0 < len(passages["passages"]) <= 3 and all(p["url"] for p in passages["passages"])
    answered = body_of(call(server.url, home.headers(), "answer",
                            {"question": "What is the hotel limit per night in London?"}))
    assert answered["outcome"] == "answered" and "USD per night" in answered["answer"]
    [citation, *_] = answered["citations"]
    section = body_of(call(server.url, home.headers(), "open_citation", {"url": citation["url"]}))
    assert (section["document_id"], section["chunk_id"]) == (citation["document_id"], citation["chunk_id"])
    assert section["quote"] is not None and "<<" in section["marked_text"]  # the quoted sentence is marked
    by_ids = body_of(call(server.url, home.headers(), "open_citation", {
        "document_id": citation["document_id"], "version": citation["version"], "chunk_id": citation["chunk_id"]}))
    assert by_ids["text"] == section["text"] and by_ids["quote"] is None
    metrics = httpx.get(f"{server.url}/metrics", headers=home.metrics_headers()).text
    assert 'citadel_requests_total{endpoint="mcp_answer",status="200",tenant="acme"}' in metrics
    assert 'citadel_answers_total{outcome="answered"}' in metrics


def test_a_user_without_access_gets_no_passage_and_cannot_open_the_citation(deployment):
    home, server, _ = deployment
    question = {"query": "executive allowance", "top_k": 8}
    exec_passages = body_of(call(server.url, home.headers(groups=("exec",)), "search", question))["passages"]
    [secret, *_] = [p for p in exec_passages if p["document_id"] == "executive-allowance"]
    staff_passages = body_of(call(server.url, home.headers(groups=("staff",)), "search", question))["passages"]
    assert staff_passages and all(p["document_id"] != "executive-allowance" for p in staff_passages)
    assert body_of(call(server.url, home.headers(groups=("visitors",)), "search", question))["passages"] == []
    refused = error_of(call(server.url, home.headers(groups=("staff",)), "open_citation", {"url": secret["url"]}))
    assert refused["code"] == "not_found"


BAD_CALLERS = {
    "unknown credential": ({"authorization": "Bearer not-a-credential"}, "invalid_credential"),
    "no credential": ({"authorization": ""}, "missing_credential"),
    "expired user context": ({"x-citadel-user-context": "expired"}, "expired_user_context"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLERS))
def test_a_bad_credential_is_refused_before_any_message_is_read(deployment, case):
    home, server, _ = deployment
    override, code = BAD_CALLERS[case]
    headers = {**home.headers(), **override}
    if override.get("x-citadel-user-context") == "expired":
        headers["x-citadel-user-context"] = home.user_context(ttl_s=1, now=1_000_000)
    with pytest.raises(ExceptionGroup) as refused:  # the official client: no session, an error
        run_session(server.url, headers, lambda session: session.list_tools())
    assert refused.group_contains(MCPError, depth=None)
    response = httpx.post(f"{server.url}/mcp", headers={**headers, "accept": "application/json, text/event-stream"},
                          json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert response.status_code == 401 and response.json()["error"]["code"] == code


def test_the_body_is_bounded_like_every_other_route(deployment):
    home, server, services = deployment
    limit = services.config.serving.max_body_bytes
    response = httpx.post(f"{server.url}/mcp", headers={**home.headers(), "content-type": "application/json"},
                          content=b" " * (limit + 1))
    assert response.status_code == 413 and response.json()["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize("era", ["handshake", "modern"])
def test_a_bad_argument_is_a_tool_error_and_the_session_goes_on(deployment, era):
    home, server, _ = deployment

    async def work(session):
        missing = await session.call_tool("search", {"top_k": 3})
        too_many = await session.call_tool("search", {"query": "hotel", "top_k": 10_000})
        not_a_url = await session.call_tool("open_citation", {"url": "/v1/retrieve"})
        unknown = await session.call_tool("delete_everything", {})
        after = await session.call_tool("search", {"query": "hotel limit", "top_k": 2})
        return missing, too_many, not_a_url, unknown, after

    missing, too_many, not_a_url, unknown, after = run_session(server.url, home.headers(), work, era)
    assert "query" in error_of(missing)["message"] and "top_k" in error_of(too_many)["message"]
    assert error_of(not_a_url)["code"] == "invalid_request" and error_of(unknown)["code"] == "invalid_request"
    assert body_of(after)["passages"]


def test_a_t2_action_through_mcp_parks_for_approval(deployment):
    home, server, services = deployment
    crm = CrmStore(db_path(Path(home.config.home).resolve()))
    started = body_of(call(server.url, home.headers(**SAM), "start_run", {"message": BARE_ACTION}))
    assert started["run_id"] and started["conversation_id"]
    services.runs.wait_for_runs(60)
    events = body_of(call(server.url, home.headers(**SAM), "run_events", {"run_id": started["run_id"]}))
    assert events["run"]["status"] == "waiting", events["run"]
    [required] = [e["data"] for e in events["events"] if e["type"] == "approval_required"]
    assert required["tool"] == "crm.create_discount_approval" and required["approver_group"] == "deal-desk"
    assert not [e for e in events["events"] if e["type"] == "final"]
    assert crm.count_approvals("northwind") == 0  # nothing reaches the CRM before a person decides
    metrics = httpx.get(f"{server.url}/metrics", headers=home.metrics_headers()).text
    assert 'citadel_approvals_pending{kind="approval",tool="crm.create_discount_approval"} 1.0' in metrics
    later = body_of(call(server.url, home.headers(**SAM), "run_events",
                         {"run_id": started["run_id"], "after_seq": events["events"][-1]["seq"]}))
    assert later["events"] == []  # every event once
    other_user = error_of(call(server.url, home.headers(tenant="northwind", user="dana", groups=("deal-desk",)),
                               "run_events", {"run_id": started["run_id"]}))
    assert other_user["code"] == "not_found"  # another user's run is not found, as over HTTP
