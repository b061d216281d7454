"""The tools a step may call, and the step executor that calls them (DESIGN.md §10).

The `search` tool (tier T0, read) retrieves for the run's principal through the `PassageRetriever`
protocol, so every passage is ACL-scoped and live-checked as on the single-shot path. The tools of a
registry file (citadel/tools/spec.py) are called over HTTP (citadel/tools/http.py), each call decided
by the policy engine (citadel/tools/policy.py) immediately before it runs. A step gets only the tool it
names (`ToolRegistry.for_step`); asking that view for another tool is refused, and nothing a document
says can add a tool or call one: tools come from the registry, calls from the plan's named step.

A step's call carries `request_id` = "<run_id>:<step_id>": derived from run and step, so a step
repeated after a crash would present the same key to a system that deduplicates.

Everything a step hands on to a model is screened first (citadel/guardrails/planted.py): a search's
passages, by the same screen as the single-shot path (a dropped one is named in the result's
`screened`), and a tool's response, whose texts carrying instructions are withheld.

With a reranker (the reader, `answer.reranker: reader`), a search reranks as the single-shot path
does: it retrieves the reranker's candidate depth and keeps the top_k it ranks first, so a run's
evidence for each part is what the reader reads best, not what fusion happened to put first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from citadel.agent.evidence import passage_record
from citadel.agent.plan import MAX_QUERY_CHARS, Step
from citadel.errors import ApprovalRequired, CitadelError, InvalidRequest, InvalidToolArguments, ToolNotAllowed
from citadel.guardrails.planted import screen_tool_response, split_screened
from citadel.retrieval.retriever import PassageRetriever
from citadel.tools.intents import IntentMatcher, RequestedAction
from citadel.tools.policy import Action, Decision, PolicyEngine
from citadel.tools.spec import RiskTier, ToolSpec
from citadel.types import Degradation, Principal

SEARCH = "search"
DEFAULT_SEARCH_TOP_K = 8
MAX_SEARCH_TOP_K = 20
# With a reranker, a search retrieves this many fused candidates for it to read (at most the cap: a
# step reads what one single-shot answer reads, never more).
DEFAULT_RERANK_CANDIDATES = 30
MAX_RERANK_CANDIDATES = 50


class ToolRefused(CitadelError):
    """The policy engine refused the call; its code is the reason (invalid_args, outside_limits,
    not_permitted, tool_paused, invalid_tool_response, unknown_tool)."""

    http_status = 403

    def __init__(self, decision: Decision):
        super().__init__(decision.detail or "the tool call was refused", code=str(decision.reasons[0]))
        self.decision = decision


class Tool(Protocol):
    name: str
    tier: RiskTier  # T0 read, T1 reversible write, T2 money or hard to undo (citadel/tools/spec.py)

    def arguments(self, ask: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """The call's effective arguments (defaults filled in from the step's `ask`), checked:
        InvalidToolArguments for anything the tool does not accept. Equal results are one call."""

    def run(self, principal: Principal, arguments: Mapping[str, Any], request_id: str) -> dict[str, Any]:
        """Do the work on behalf of `principal`; a JSON-able result."""


class SearchTool:
    """Retrieve passages for the principal (ACL-scoped, live-checked): the agentic path's one read."""

    name = SEARCH
    tier = RiskTier.T0

    def __init__(self, retriever: PassageRetriever, top_k: int = DEFAULT_SEARCH_TOP_K, reranker=None,
                 candidates: int = DEFAULT_RERANK_CANDIDATES, screen=None):
        """`reranker`: reorders the fused candidates (None, or one that is not `enabled`: the fused
        order stands); `candidates`: how many it reads, bounded by MAX_RERANK_CANDIDATES; `screen`: the
        single-shot path's planted-instruction screen (True: drop the passage; None: no screen)."""
        self.retriever = retriever
        self.screen = screen
        self.top_k = max(1, min(top_k, MAX_SEARCH_TOP_K))
        self.reranker = reranker if reranker is not None and getattr(reranker, "enabled", True) else None
        self.candidates = max(1, min(candidates, MAX_RERANK_CANDIDATES))

    def arguments(self, ask: str, args: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(args) - {"query", "top_k"})
        if unknown:
            raise InvalidToolArguments(f"search takes query and top_k, not {unknown}")
        query = args.get("query") or ask
        if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_CHARS:
            raise InvalidToolArguments(f"search needs a query of 1 to {MAX_QUERY_CHARS} characters")
        top_k = args.get("top_k", self.top_k)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_SEARCH_TOP_K:
            raise InvalidToolArguments(f"search top_k must be an integer from 1 to {MAX_SEARCH_TOP_K}")
        return {"query": " ".join(query.split()), "top_k": top_k}

    def run(self, principal: Principal, arguments: Mapping[str, Any], request_id: str) -> dict[str, Any]:
        top_k = arguments["top_k"]
        depth = top_k if self.reranker is None else max(top_k, self.candidates)
        result = self.retriever.retrieve(principal, arguments["query"], top_k=depth, request_id=request_id)
        passages, degraded = list(result.passages), [str(d) for d in result.degraded]
        passages, dropped = split_screened(passages, self.screen)
        if self.reranker is not None and passages:
            try:
                passages = self.reranker.rerank(arguments["query"], passages, top_k)
            except Exception:  # fail open, visibly: the fused order stands, as on the single-shot path
                degraded.append(str(Degradation.RERANK_SKIPPED))
        found = {"passages": [passage_record(p) for p in passages[:top_k]], "degraded": degraded}
        if dropped:
            found["screened"] = [{"chunk_id": p.chunk_id, "document_id": p.document_id, "version": p.version}
                                 for p in dropped]
        return found


def target_checks_permission(principal: Principal, spec: ToolSpec) -> bool:
    """The live permission check of a tool call is its target system's: it verifies the user's context
    and applies the user's own rights on every call (the policy engine checks the tool's write groups)."""
    return True


class StepTools:
    """The tools one step may call: only those it names. A tool with a spec in the policy engine is
    called only when the engine says so, immediately before the call (schema, pause, permission,
    limits, tier), and its response is checked against the spec afterwards."""

    def __init__(self, tools: Mapping[str, Tool], allowed: Iterable[str], policy: PolicyEngine | None = None):
        self._tools = {name: tools[name] for name in allowed if name in tools}
        self._policy = policy

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def call(self, name: str, principal: Principal, ask: str, args: Mapping[str, Any],
             request_id: str, approved: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """`approved`: the final arguments a person approved for this step (a T2 call then runs with
        them, after every check again, now)."""
        tool = self._tools.get(name)
        if tool is None:
            raise ToolNotAllowed(f"this step may call {sorted(self._tools)}, not {name!r}")
        arguments = tool.arguments(ask, approved if approved is not None else args)
        spec = self._policy.spec(name) if self._policy is not None else None
        if spec is None:
            return tool.run(principal, arguments, request_id)
        if approved is not None:
            decision = self._policy.recheck_approved(name, arguments, principal, target_checks_permission)
        else:
            decision = self._policy.decide(name, arguments, principal, target_checks_permission)
        if decision.action == Action.REFUSE:
            raise ToolRefused(decision)
        if decision.action == Action.NEEDS_APPROVAL:
            raise ApprovalRequired(spec, arguments)
        result = tool.run(principal, arguments, request_id)
        checked = self._policy.check_response(name, result.get("result"))
        if checked.action == Action.REFUSE:
            raise ToolRefused(checked)
        screened, reasons = screen_tool_response(result.get("result"))
        if reasons:  # the system answered with text someone wrote for the model: withheld, and said so
            result = {**result, "result": screened, "screened_response": reasons}
        return {**result, "audit": decision.action == Action.RUN_AND_AUDIT}


class ToolRegistry:
    """The tools of this process, by name, and the policy engine over those with a spec."""

    def __init__(self, tools: Iterable[Tool], policy: PolicyEngine | None = None):
        self._tools = {tool.name: tool for tool in tools}
        self._policy = policy
        self._intents = IntentMatcher(policy.specs() if policy is not None else ())

    def requested_actions(self, message: str, subject: str | None) -> list[RequestedAction]:
        """The actions the user's own message asks for (citadel/tools/intents.py), with arguments this
        process's tools accept; never read from anything but the user's message."""
        if not self._intents:
            return []
        return self._intents.find(message, subject, self.names(), self.check_args)

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    @property
    def policy(self) -> PolicyEngine | None:
        return self._policy

    def spec(self, name: str) -> ToolSpec | None:
        """The named tool's spec (None for a tool built in code, like search)."""
        return self._policy.spec(name) if self._policy is not None else None

    def current_record(self, name: str, principal: Principal, args: Mapping[str, Any]) -> dict[str, Any] | None:
        """The record a write would change, as the user may read it now (None when the tool cannot say)."""
        current = getattr(self._tools.get(name), "current", None)
        return current(principal, args) if current is not None else None

    def check_args(self, name: str, args: Mapping[str, Any]) -> None:
        """For plan validation: the named tool accepts these arguments (InvalidToolArguments if not)."""
        tool = self._tools.get(name)
        if tool is None:
            raise InvalidToolArguments(f"no tool named {name!r}")
        tool.arguments("-", args)  # a placeholder ask: only explicit arguments are checked here

    def call_key(self, step: Step) -> str:
        """The call a step makes, canonically: equal keys are one identical call repeated."""
        tool = self._tools.get(step.tool)
        try:
            arguments = tool.arguments(step.ask, step.args) if tool is not None else dict(step.args)
        except InvalidRequest:
            arguments = dict(step.args)
        return json.dumps([step.tool, arguments], sort_keys=True)

    def for_step(self, step: Step) -> StepTools:
        return StepTools(self._tools, [step.tool], self._policy)


# ---------------------------------------------------------------------- executing a step
@dataclass(frozen=True)
class StepContext:
    run_id: str
    principal: Principal
    approved: Mapping[str, Any] | None = None  # a person's approved arguments for this step's T2 call

    def request_id(self, step: Step) -> str:
        """The step's idempotency key: derived from run and step, the same on every attempt."""
        return f"{self.run_id}:{step.id}"


class StepExecutor(Protocol):
    """Runs one step with the tools it may use; a JSON-able result ({"passages": [...]} for search).
    Injectable, so a test can count executions or hold steps at a barrier."""

    def execute(self, context: StepContext, step: Step, tools: StepTools) -> dict[str, Any]: ...


class ToolStepExecutor:
    """The default executor: the step's one tool, called with its arguments."""

    def execute(self, context: StepContext, step: Step, tools: StepTools) -> dict[str, Any]:
        return tools.call(step.tool, context.principal, step.ask, step.args, context.request_id(step),
                          context.approved)
