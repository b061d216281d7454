"""The MCP server at `/mcp` (DESIGN.md §12): the Model Context Protocol's Streamable HTTP transport,
through the official `mcp` SDK, for agent hosts. Its tools are doors onto the same services as the
JSON routes:

    search         passages with their citations           QueryService.retrieve   (POST /v1/retrieve)
    answer         a cited answer, a refusal, or held       QueryService.answer     (POST /v1/answer)
    open_citation  the section a citation names             DocumentsService.section (its section URL)
    start_run      a message that starts an agentic run     RunsService.post_message (POST .../messages)
    run_events     a run's state and its events after seq   RunsService.run/events  (GET /v1/runs/{id}/events)

Identity is the JSON API's: every HTTP request to `/mcp` carries the calling service's bearer
credential and the user's signed context (`authorization`, `x-citadel-user-context`), verified here by
`Access` before the SDK reads a message (the admission middleware authenticates `/v1/` only); a bad
one is the API's own 401 error body. Each tool then calls its service as that caller, on the worker
pool within the request's deadline, counted per endpoint (`mcp_<tool>`), so budgets, guardrails, the
answer cache, tracing and the live ACL check apply exactly as over JSON, and a T2 action parks for
approval. The body is bounded by the admission middleware (`serving.max_body_bytes`) like any other.

Stateless: each POST is served on its own (no session kept between requests), so any gateway replica
answers any request; responses are plain JSON (no server-sent stream: no tool sends progress). A bad
argument, an unknown tool or a refusal by a service is a tool result with `isError` (the API's error
code and message as its text), never a dropped session. The SDK's DNS-rebinding check is off: no
request has ambient authority (no cookie), each carries its own credential.

The session manager runs within the app's lifespan (`mount_mcp` chains it onto the app's own): ASGI
servers, Ray Serve and TestClient (as a context manager) run it; until it runs, `/mcp` answers 503.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Optional

from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolRequestParams, CallToolResult, ListToolsResult, TextContent, Tool, ToolAnnotations
from pydantic import Field, ValidationError, model_validator
from starlette.datastructures import Headers
from starlette.requests import Request

from citadel.errors import CitadelError, InvalidRequest, Overloaded
from citadel.types import QUOTE_KEY_CHARS, parse_section_url
from serving.http.deps import BlockingRunner, CallerWork, services_of_scope
from serving.http.protocol import RequestBody
from serving.http.routers.documents.routes import MAX_ID_CHARS, MAX_VERSION
from serving.http.routers.query.protocol import MAX_QUESTION_CHARS, MAX_TOP_K
from serving.services.access import Caller
from serving.services.compose import Services

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
SERVER_NAME = "citadel"
SERVER_VERSION = "1"
INSTRUCTIONS = ("Citadel answers from an organisation's approved documents, only with what the user may read now. "
                "`search` returns passages, `answer` a cited answer or an honest refusal; every citation's `url` "
                "opens with `open_citation`. Multi-part questions and actions go through `start_run`, then "
                "`run_events` until a final event (a run waiting for approval has status `waiting`).")
# The longest a run_events call may wait for the run's next event (long poll), in seconds.
MAX_EVENT_WAIT_S = 30.0
# A citation URL's longest form: two ids of MAX_ID_CHARS, each up to 3x longer percent-encoded, and the rest.
MAX_URL_CHARS = 6 * MAX_ID_CHARS + 256
# The highest run event seq a caller may name (the HTTP route's Last-Event-ID allows 12 digits).
MAX_SEQ = 10**12 - 1
MAX_RUN_ID_CHARS = 128


# ---------------------------------------------------------------------- the tools' arguments
class SearchArgs(RequestBody):
    query: str = Field(..., min_length=1, max_length=MAX_QUESTION_CHARS, description="What to search for.")
    top_k: int = Field(8, ge=1, le=MAX_TOP_K, description="Passages to return.")


class AnswerArgs(RequestBody):
    question: str = Field(..., max_length=MAX_QUESTION_CHARS, description="The question.")


class OpenCitationArgs(RequestBody):
    url: Optional[str] = Field(None, min_length=1, max_length=MAX_URL_CHARS,
                               description="A citation's `url` (as search and answer return it); or name the "
                                           "section by document_id, version and chunk_id instead.")
    document_id: Optional[str] = Field(None, min_length=1, max_length=MAX_ID_CHARS)
    version: Optional[int] = Field(None, ge=1, le=MAX_VERSION)
    chunk_id: Optional[str] = Field(None, min_length=1, max_length=MAX_ID_CHARS)
    quote: Optional[str] = Field(None, min_length=QUOTE_KEY_CHARS, max_length=QUOTE_KEY_CHARS, pattern="^[0-9a-f]+$",
                                 description="The key of the quoted sentence to mark (a citation's url carries it).")

    @model_validator(mode="after")
    def _one_way_to_name_it(self) -> "OpenCitationArgs":
        ids = (self.document_id, self.version, self.chunk_id)
        if (self.url is None) == all(value is None for value in ids) or (self.url is None and None in ids):
            raise ValueError("give either url, or all of document_id, version and chunk_id")
        return self


class StartRunArgs(RequestBody):
    # Its length is checked by the runs service against `agent.max_message_chars`, as over HTTP.
    message: str = Field(..., max_length=100_000, description="The user's message; it starts a run.")
    conversation_id: Optional[str] = Field(None, min_length=1, max_length=MAX_RUN_ID_CHARS,
                                           description="Continue this conversation (one of the user's own); "
                                                       "none: a new one.")


class RunEventsArgs(RequestBody):
    run_id: str = Field(..., min_length=1, max_length=MAX_RUN_ID_CHARS)
    after_seq: int = Field(0, ge=0, le=MAX_SEQ, description="Only events after this seq (the last one seen).")
    wait_s: float = Field(0.0, ge=0.0, le=MAX_EVENT_WAIT_S,
                          description="When no event is newer, wait up to this long for the next one.")


# ---------------------------------------------------------------------- the tools
@dataclass(frozen=True)
class Call:
    """One tool call: the verified caller's work on the worker pool, and the HTTP request's ids."""

    work: CallerWork
    services: Services
    request_id: str
    correlation_id: Optional[str]
    timeout_s: float
    executor: Any

    async def longer(self, extra_s: float, endpoint: str, method: Callable[..., Any], *args: Any) -> Any:
        """As `work`, with `extra_s` more than the request's deadline (a long poll's wait)."""
        runner = BlockingRunner(self.executor, self.timeout_s + extra_s)
        return await CallerWork(self.work.caller, runner, self.services)(endpoint, method, *args)


async def search(call: Call, args: SearchArgs) -> dict:
    return await call.work("mcp_search", call.services.query.retrieve, args.query, args.top_k, call.request_id,
                           call.correlation_id)


async def answer(call: Call, args: AnswerArgs) -> dict:
    return await call.work("mcp_answer", call.services.query.answer, args.question, call.request_id,
                           call.correlation_id)


async def open_citation(call: Call, args: OpenCitationArgs) -> dict:
    if args.url is not None:
        ref = parse_section_url(args.url)
        if ref is None:
            raise InvalidRequest("url is not a citation's section URL (…/v1/documents/{document}/versions/"
                                 "{version}/sections/{chunk_id})")
        if ref.quote_key is not None and not is_quote_key(ref.quote_key):
            raise InvalidRequest(f"the url's quote is not a quote key ({QUOTE_KEY_CHARS} hex digits)")
        document_id, version, chunk_id, quote = ref.document_id, ref.version, ref.chunk_id, ref.quote_key
    else:
        document_id, version, chunk_id, quote = args.document_id, args.version, args.chunk_id, args.quote
    return await call.work("mcp_open_citation", call.services.documents.section, document_id, version, chunk_id,
                           quote)


def is_quote_key(value: str) -> bool:
    """What the section route's `quote` accepts (citadel.types.quote_key writes it)."""
    return len(value) == QUOTE_KEY_CHARS and all(c in "0123456789abcdef" for c in value)


async def start_run(call: Call, args: StartRunArgs) -> dict:
    runs = call.services.runs
    conversation_id = args.conversation_id
    if conversation_id is None:
        conversation_id = (await call.work("mcp_start_run", runs.create_conversation))["conversation_id"]
    started = await call.work("mcp_start_run", runs.post_message, conversation_id, args.message)
    return {**started, "conversation_id": conversation_id}


async def run_events(call: Call, args: RunEventsArgs) -> dict:
    runs = call.services.runs
    events = await call.work("mcp_run_events", runs.events, args.run_id, args.after_seq)  # not the caller's: 404
    if not events and args.wait_s > 0:
        events = await call.longer(args.wait_s, "mcp_run_events", runs.wait_events, args.run_id, args.after_seq,
                                   args.wait_s)
    state = await call.work("mcp_run_events", runs.run, args.run_id)
    return {"run": state, "events": events}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    arguments: type[RequestBody]
    run: Callable[[Call, Any], Awaitable[dict]]
    read_only: bool = True


TOOLS = {spec.name: spec for spec in (
    ToolSpec("search", "Passages from the documents the user may read, best first, each with its citation "
                       "(document, version, heading, page, governance) and the `url` open_citation opens.",
             SearchArgs, search),
    ToolSpec("answer", "A cited answer from the documents the user may read: `outcome` is answered, "
                       "not_confirmed (the topic was found, not the fact: nothing asserted) or refused; "
                       "`citations` hold each source's `url`. `status: review_pending` means a person reviews "
                       "it first: ask again later.", AnswerArgs, answer),
    ToolSpec("open_citation", "The whole section a citation names (its `url`, or document_id, version and "
                              "chunk_id), with the quoted sentence marked <<like this>>; not found when the user "
                              "may not read it now.", OpenCitationArgs, open_citation),
    ToolSpec("start_run", "Start an agentic run for a multi-part question or an action (a tool call such as a "
                          "CRM request, which may wait for a person's approval). Returns run_id and "
                          "conversation_id at once; follow it with run_events.", StartRunArgs, start_run,
             read_only=False),
    ToolSpec("run_events", "A run's state (status: queued, running, waiting for an approval, succeeded, ...) "
                           "and its events after `after_seq` (progress, citation, approval_required, "
                           "review_pending, final, error), waiting up to wait_s for the next one.",
             RunEventsArgs, run_events),
)}


# ---------------------------------------------------------------------- the MCP server
def _listing() -> list[Tool]:
    return [Tool(name=spec.name, description=spec.description, input_schema=spec.arguments.model_json_schema(),
                 annotations=ToolAnnotations(read_only_hint=spec.read_only, destructive_hint=False,
                                             open_world_hint=False))
            for spec in TOOLS.values()]


def _result(body: dict) -> CallToolResult:
    """The service's body as structured content, and as JSON text for hosts that read only text."""
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(body, ensure_ascii=False))],
                          structured_content=body)


def _tool_error(code: str, message: str, request_id: str) -> CallToolResult:
    error = {"error": {"code": code, "message": message, "request_id": request_id}}
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(error, ensure_ascii=False))],
                          is_error=True)


def _invalid_arguments(error: ValidationError) -> str:
    """The problems by field, never the values given (they are the caller's data)."""
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in error.errors())
    return f"invalid arguments: {problems}"


def _call_of(request: Request) -> Call:
    services: Services = request.app.state.services
    caller: Caller = request.state.mcp_caller
    timeout_s = services.config.serving.request_timeout_s
    executor = getattr(request.app.state, "executor", None)
    state = request.state
    request_id = getattr(state, "request_id", None) or uuid.uuid4().hex
    return Call(CallerWork(caller, BlockingRunner(executor, timeout_s), services), services, request_id,
                getattr(state, "correlation_id", None), timeout_s, executor)


async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
    return ListToolsResult(tools=_listing())


async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
    """One tool call as the HTTP request's verified caller; every failure is a tool error."""
    call = _call_of(ctx.request)
    spec = TOOLS.get(params.name)
    if spec is None:
        return _tool_error(InvalidRequest.code, f"no tool named {params.name[:100]!r}; see tools/list",
                           call.request_id)
    try:
        args = spec.arguments.model_validate(params.arguments or {})
    except ValidationError as error:
        return _tool_error(InvalidRequest.code, _invalid_arguments(error), call.request_id)
    try:
        return _result(await spec.run(call, args))
    except CitadelError as error:
        return _tool_error(error.code, error.message, call.request_id)
    except Exception:
        log.exception("MCP tool %s failed (request %s)", spec.name, call.request_id)
        return _tool_error("internal_error", "internal error; see the server log with this request id",
                           call.request_id)


def make_server() -> Server:
    return Server(SERVER_NAME, version=SERVER_VERSION, instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool)


class McpEndpoint:
    """The ASGI app at `/mcp`: authenticates each request through `Access`, then hands it to the
    SDK's session manager (stateless, JSON responses), one manager per run of the app's lifespan."""

    def __init__(self, server: Server | None = None):
        self.server = server or make_server()
        self._manager: StreamableHTTPSessionManager | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        manager = StreamableHTTPSessionManager(
            self.server, json_response=True, stateless=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        """A CitadelError raised here (401, 503) reaches the app's error handlers: the API's error body."""
        services = services_of_scope(scope)
        if services is None or self._manager is None:
            raise Overloaded("the MCP server is still starting")
        headers = Headers(scope=scope)
        caller = services.access.caller(headers.get("authorization"), headers.get("x-citadel-user-context"))
        scope.setdefault("state", {})["mcp_caller"] = caller
        await self._manager.handle_request(scope, receive, send)


def mount_mcp(app) -> McpEndpoint:
    """Serve MCP at `/mcp` on `app` (a FastAPI app), its session manager run within the app's lifespan."""
    endpoint = McpEndpoint()
    app.add_route(MCP_PATH, endpoint, include_in_schema=False)
    previous = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(running_app) -> AsyncIterator[Any]:
        async with previous(running_app) as state, endpoint.running():
            yield state

    app.router.lifespan_context = lifespan
    return endpoint
