"""The query endpoint family (DESIGN.md §4): /v1/retrieve and /v1/answer for a verified caller.

Budgets are charged before any work and fail closed; the answer cache is ACL-scoped and live-checked
(answer_cache.py); every answer, cache hits included, is a row of the answer log. The request's
deadline is the one the HTTP edge opened (citadel.resilience.deadline): every hop below takes what
is left of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from citadel.answer.service import AnswerService, outcome_of
from citadel.catalog.base import Catalog
from citadel.config import AnswerConfig, StateConfig
from citadel.errors import BudgetExhausted
from citadel.guardrails.router import NEEDS_CLARIFICATION, SENSITIVE_DATA
from citadel.retrieval.retriever import PassageRetriever
from citadel.reviews.checks import single_shot_verdict
from citadel.reviews.tasks import CLOSED, HOLD, REVIEW_PENDING, ReviewPolicy, held_body
from citadel.state import State
from citadel.state.base import StateUnavailable, answer_cache_key
from citadel.tools.approvals import ApprovalStore
from citadel.tracing import emit_span, emit_stage_spans
from citadel.types import Degradation, Principal
from serving.services.access import Caller
from serving.services.answer_cache import AnswerCacheView
from serving.services.failures import failing_closed, unavailable
from serving.services.metrics import ApiMetrics

CLARIFY = "clarify"  # the outcome label of a clarifying question (citadel_answers_total)
# Rough tokens per word, to estimate a request's cost before it runs (the budget charges up front).
TOKENS_PER_WORD = 1.3
TOKENS_PER_THOUSAND = 1000.0


class QueryService:
    def __init__(self, answer_config: AnswerConfig, state_config: StateConfig, catalog: Catalog, state: State,
                 answers: AnswerService, retriever: PassageRetriever, cache: AnswerCacheView, metrics: ApiMetrics,
                 reviews: ReviewPolicy, approvals: ApprovalStore | None = None,
                 clock: Callable[[], float] = time.time):
        """`answer_config`: the token budgets a request's cost is estimated from and the reranker;
        `state_config`: the price of tokens; `reviews`: who reviews a held answer and for how long;
        `approvals`: where a held answer's review task waits (citadel/reviews/tasks.py); None: answers
        are never held (their failed checks reported in the text, as before reviews existed)."""
        self.approvals = approvals
        self.reviews = reviews
        self.clock = clock
        self.answer_config = answer_config
        self.state_config = state_config
        self.catalog = catalog
        self.state = state
        self.answers = answers
        self.retriever = retriever
        self.cache = cache
        self.metrics = metrics

    # ------------------------------------------------------------------ budgets
    def charge(self, principal: Principal, text: str) -> int:
        """Charge one request and its estimated cost, before any work; the tokens paid for. Budgets
        guard spending, so an unreachable store refuses (fails closed) rather than letting requests
        through uncounted. A run is charged this way when it starts (its steps charge the rest)."""
        tokens = self._estimated_tokens(text)
        cost = tokens / TOKENS_PER_THOUSAND * self.state_config.cost_per_1k_tokens
        try:
            decision = self.state.budgets.charge(principal.tenant_id, principal.user_id, 1, cost)
        except StateUnavailable as error:
            raise unavailable("state_unavailable", "the budget store", error) from None
        if not decision.allowed:
            self.metrics.budget_rejected(principal.tenant_id)
            raise BudgetExhausted(decision.reason or "budget exhausted", retry_after_s=decision.retry_after_s)
        self.metrics.charged(principal.tenant_id, principal.user_id, cost)
        return tokens

    def _estimated_tokens(self, text: str) -> int:
        answer = self.answer_config
        return int(len(text.split()) * TOKENS_PER_WORD + answer.total_token_budget + answer.max_new_tokens)

    # ------------------------------------------------------------------ retrieve
    def retrieve(self, caller: Caller, query: str, top_k: int, request_id: str,
                 correlation_id: str | None = None) -> dict:
        principal = caller.principal
        self.charge(principal, query)
        started = time.perf_counter()
        with failing_closed():
            result = self.retriever.retrieve(principal, query, top_k=top_k, request_id=request_id)
        self.metrics.stage_latency.labels("retrieve").observe(time.perf_counter() - started)
        chunk_ids = [p.chunk_id for p in result.passages]
        emit_stage_spans(request_id, result.timings_ms, {"recheck": chunk_ids}, correlation_id=correlation_id)
        self.metrics.observe_stages(result.timings_ms)
        for what in result.degraded:
            self.metrics.degraded.labels(what).inc()
        body = result.to_dict()
        body["request_id"] = request_id
        return body

    # ------------------------------------------------------------------ answer
    def answer(self, caller: Caller, question: str, request_id: str, correlation_id: str | None = None) -> dict:
        """One answer; every one, cache hits included, is a row of the answer log (the question
        withheld when it holds sensitive data), counted by its outcome."""
        body = self._answer(caller, question, request_id, correlation_id)
        self.metrics.count_answer(answer_outcome(body))
        return body

    def _answer(self, caller: Caller, question: str, request_id: str, correlation_id: str | None) -> dict:
        principal = caller.principal
        self.charge(principal, question)
        degraded: list[str] = []
        with failing_closed():
            segment = self.catalog.published_segment(principal.tenant_id) or "none"
            key = answer_cache_key(principal.tenant_id, principal.acl_signature, question, segment,
                                   self.answers.bundle_id)  # a new config answers afresh
            cached = self.cache.get(key, principal, degraded)  # a hit is live-checked in the catalog
        if cached is not None:
            return self._cache_hit(cached, principal, question, request_id, degraded, correlation_id)
        with failing_closed():
            response = self.answers.ask(principal, question, request_id=request_id, correlation_id=correlation_id)
        body = response.to_dict()
        body["degraded"] = [*body["degraded"], *degraded]
        self._record_answer(request_id, response, body, correlation_id)
        held = self._review(principal, question, response, request_id)
        if held is not None:
            return held  # never cached: asking again runs every check again
        # A transient downgrade is not kept; nor is a refusal of sensitive data (its key derives from the secret).
        if not set(body["degraded"]) - self._configured_downgrades() and body["reason"] != SENSITIVE_DATA:
            self.cache.put(key, principal.tenant_id, body, body["degraded"])
        return {**body, "cached": False}

    def _review(self, principal: Principal, question: str, response, request_id: str) -> dict | None:
        """A held answer's `202 review_pending` body, or a review's closing answer; None to deliver."""
        if self.approvals is None:
            return None
        with failing_closed():
            verdict = single_shot_verdict(self.approvals, self.reviews, self.catalog, principal, question, response,
                                          clock=self.clock)
        if verdict.action == HOLD:
            return {**held_body(verdict.task, verdict.task.context.get("message", "")), "request_id": request_id}
        if verdict.action == CLOSED:
            reason = f"review_{verdict.task.status}"
            return {"request_id": request_id, "answer": f"The answer was held for a review ({verdict.task.reason}). "
                    f"{verdict.closed_message}", "outcome": outcome_of(True, reason), "refused": True,
                    "reason": reason, "degraded": [], "citations": [], "cached": False}
        return None

    def _cache_hit(self, cached: dict, principal: Principal, question: str, request_id: str, degraded: list[str],
                   correlation_id: str | None) -> dict:
        self.metrics.cache.labels("hit").inc()
        emit_span(request_id, "cache", 0.0, [c["chunk_id"] for c in cached["citations"]], hit=True,
                  correlation_id=correlation_id, bundle_id=cached.get("bundle_id"))
        body = {**cached, "request_id": request_id, "degraded": degraded, "cached": True}
        with failing_closed():
            self.answers.log_cache_hit(principal, question, body, correlation_id)
        return body

    def _configured_downgrades(self) -> set[str]:
        """Downgrades that every answer carries by configuration (reranking turned off), which a
        later request would carry as well: they do not stop an answer being cached."""
        return {Degradation.RERANK_SKIPPED} if self.answer_config.reranker == "none" else set()

    def _record_answer(self, request_id: str, response, body: dict, correlation_id: str | None = None) -> None:
        self.metrics.observe_stages({k: v for k, v in response.timings_ms.items() if k != "total"})
        self.metrics.count_prompt_tokens(response.prompt_tokens)
        if body["refused"]:
            self.metrics.refusals.labels(body["reason"] or "unknown").inc()
        for what in body["degraded"]:
            self.metrics.degraded.labels(what).inc()
        chunks = {"rerank": [p.chunk_id for p in response.passages],
                  "validate": [c["chunk_id"] for c in body["citations"]]}
        if response.trace is not None:  # what the search found and what the prompt held
            chunks.update(search=[p.chunk_id for p in response.trace.candidates],
                          generate=[p.chunk_id for p in response.trace.sources])
        emit_stage_spans(request_id, response.timings_ms, chunks, correlation_id=correlation_id,
                         bundle_id=body.get("bundle_id"))  # the config that shaped it (DESIGN.md §11)


def answer_outcome(body: dict) -> str:
    """The outcome an answer's body is counted under: review_pending (held for a person), clarify (a
    clarifying question), else its `outcome` (answered, not_confirmed, refused)."""
    if body.get("status") == REVIEW_PENDING:
        return REVIEW_PENDING
    return CLARIFY if body.get("reason") == NEEDS_CLARIFICATION else body["outcome"]
