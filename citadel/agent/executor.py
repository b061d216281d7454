"""Executing a step (DESIGN.md §10): the `search` tool and the step executor.

The `search` tool (tier T0, read) retrieves for the run's principal through the `PassageRetriever`
protocol, so every passage is ACL-scoped and live-checked as on the single-shot path; its passages are
screened by the same planted-instruction screen (a dropped one is named in the result's `screened`).
With a reranker (the reader, `answer.reranker: reader`), a search reranks as the single-shot path
does: it retrieves the reranker's candidate depth and keeps the top_k it ranks first, so a run's
evidence for each part is what the reader reads best, not what fusion happened to put first.

A step calls only the tool it names, through the view the tool registry gives it
(citadel/tools/registry.py: policy, approvals, response checks). A step's call carries
`request_id` = "<run_id>:<step_id>": derived from run and step, so a step repeated after a crash would
present the same key to a system that deduplicates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from citadel.agent.evidence import passage_record
from citadel.agent.plan import MAX_QUERY_CHARS, SEARCH, Step
from citadel.errors import InvalidToolArguments
from citadel.guardrails.planted import split_screened
from citadel.retrieval.retriever import PassageRetriever
from citadel.tools.registry import StepTools, ToolOutcome
from citadel.tools.spec import RiskTier
from citadel.types import Degradation, Principal

DEFAULT_SEARCH_TOP_K = 8
MAX_SEARCH_TOP_K = 20
# With a reranker, a search retrieves this many fused candidates for it to read (at most the cap: a
# step reads what one single-shot answer reads, never more).
DEFAULT_RERANK_CANDIDATES = 30
MAX_RERANK_CANDIDATES = 50


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


@dataclass(frozen=True)
class StepContext:
    run_id: str
    principal: Principal
    approved: Mapping[str, Any] | None = None  # a person's approved arguments for this step's T2 call

    def request_id(self, step: Step) -> str:
        """The step's idempotency key: derived from run and step, the same on every attempt."""
        return f"{self.run_id}:{step.id}"


class StepExecutor(Protocol):
    """Runs one step with the tools it may use; a JSON-able result ({"passages": [...]} for search), or
    why its call did not run (citadel/tools/registry.py `ToolOutcome`). Injectable, so a test can count
    executions or hold steps at a barrier."""

    def execute(self, context: StepContext, step: Step, tools: StepTools) -> ToolOutcome: ...


class ToolStepExecutor:
    """The default executor: the step's one tool, called with its arguments."""

    def execute(self, context: StepContext, step: Step, tools: StepTools) -> ToolOutcome:
        return tools.call(step.tool, context.principal, step.ask, step.args, context.request_id(step),
                          context.approved)
