"""AnswerService: one grounded, cited answer or a refusal (DESIGN.md §4 steps 2-7).

route → retrieve (~50 fused, live-checked candidates) → drop planted instructions → rerank to 8
→ confidence gate (refuse without generating) → parent-section expansion → generate → validate
→ conflict notes → answer log. The reranker and the generator fail open with a visible downgrade
(`degraded`); identity, ACL and the live check happened in the retriever and fail closed there.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import uuid
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from citadel.answer.clarify import clarifying_question
from citadel.answer.confirm import Confirmation, ConfirmSettings, confirm, not_confirmed_reply
from citadel.answer.conflicts import Conflict, detect_conflicts
from citadel.answer.expand import SectionExpander, layout_of, source_terms
from citadel.answer.extractive import ExtractiveGenerator
from citadel.answer.gate import (CLARIFY, NEEDS_CLARIFICATION, NO_ELIGIBLE_SOURCE, ConfidenceGate, GateDecision,
                                 cosine_scores, term_idf, weighted_coverage)
from citadel.answer.gate_model import CalibratedGate
from citadel.answer.glossary import glossary_of
from citadel.answer.links import LinkPolicy
from citadel.answer.semantic import ClaimSupport, term_matches
from citadel.answer.slots import asked_slot
from citadel.answer.validator import (AnswerValidator, ValidatedAnswer, marker_numbers, quoted_sentence,
                                      renumber_markers, strip_markers)
from citadel.catalog.base import Catalog
from citadel.config import AgentConfig
from citadel.generation.base import Generator, prompt_token_counts
from citadel.guardrails.base import QuestionRouter
from citadel.guardrails.personal import PATTERNS_ONLY, PersonalDataMasker
from citadel.guardrails.pii import sensitive_data_kind
from citadel.guardrails.planted import split_screened, with_screened_notice
from citadel.guardrails.redaction import loggable_question, masked_record, withheld_entry
from citadel.guardrails.router import AllowAllRouter
from citadel.prompting.prompt import (AGENT_SYSTEM_PROMPT, PROMPT_VERSION, SYSTEM_PROMPT, AssembledPrompt,
                                      PromptAssembler, PromptItem, source_records)
from citadel.prompting.source import Source
from citadel.rerank.base import Reranker
from citadel.retrieval.partitions import PartitionCache
from citadel.segments.partition import Partition
from citadel.text import content_terms, decompound, spell_out_shorthand
from citadel.tools.spec import MODEL_TARGET
from citadel.types import Degradation, Passage, Principal

log = logging.getLogger(__name__)

# The three outcomes a client renders (DESIGN.md §4 step 6): an asserted answer; the topic found but
# the asked fact not (nothing asserted, the closest sections cited); nothing on topic readable.
ANSWERED, NOT_CONFIRMED, REFUSED = "answered", "not_confirmed", "refused"
# A not-confirmed reply cites at most this many of the closest sections.
CLOSEST_SECTIONS = 3
OUTCOMES = (ANSWERED, NOT_CONFIRMED, REFUSED)


def outcome_of(refused: bool, reason: str | None) -> str:
    """The outcome of a reply from its `refused` flag and reason (not_confirmed is a refusal to
    assert, with evidence: older clients that read only `refused` still never show it as an answer)."""
    if not refused:
        return ANSWERED
    return NOT_CONFIRMED if reason == NOT_CONFIRMED else REFUSED


REFUSAL_REPLIES = {
    "low_coverage": "The documents available to you do not contain enough information to answer this question.",
    "no_eligible_source": "No document available to you covers this question.",
}
SECONDS_PER_DAY = 86_400.0
# Old answer-log rows are purged on the request path, but at most this often.
PURGE_INTERVAL_S = 3_600.0
# Rerank calls run on these threads so a slow one can be abandoned at its deadline; a stuck
# reranker occupies them and later calls time out fast, which skips rerank instead of queueing.
RERANK_WORKERS = 2
# Query vectors remembered for the gate's vector score (keyed by question text).
QUERY_MEMO_CAPACITY = 256


@dataclass
class AnswerResponse:
    request_id: str
    answer: str
    refused: bool
    reason: str | None
    degraded: list[str]
    citations: list[dict]
    conflicts: list[dict] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    passages: list[Passage] = field(default_factory=list)  # what the gate saw (evaluation, logs)
    gate: GateDecision | None = None
    trace: "AnswerTrace | None" = None  # what each stage kept (evaluation: `eval rag --by-stage`)
    # Citation markers the draft had that named no source (the validator removed them): a failed
    # check that goes to a person before the answer leaves (citadel/reviews/checks.py). Not public.
    invalid_markers: int = 0
    confirmation: dict | None = None  # what the confirmation read and decided (logs, evaluation). Not public.
    # The claim verifier's verdicts (citadel/quality/verifier.py): per claim, its cited sources, the
    # judge's probability, what code computed and whether it was kept, removed or corrected. Not public.
    verification: dict | None = None
    bundle_id: str | None = None  # the config bundle that shaped it (citadel/quality/bundle.py)
    # {"cached", "uncached"}: the prompt tokens the model server served from its prefix cache and
    # computed, where the backend said them (metrics, the answer log). Not public.
    prompt_tokens: dict[str, int] | None = None

    @property
    def outcome(self) -> str:
        return outcome_of(self.refused, self.reason)

    def to_dict(self) -> dict:
        """The public JSON of `ask --json` and the HTTP API: exactly these keys."""
        return {"request_id": self.request_id, "answer": self.answer, "outcome": self.outcome,
                "refused": self.refused, "reason": self.reason, "degraded": list(self.degraded),
                "citations": [dict(c) for c in self.citations], "bundle_id": self.bundle_id}


@dataclass
class AnswerTrace:
    """What each stage of one `ask` kept, for finding where an answer gets lost (not logged, not public)."""

    search_query: str = ""
    candidates: list[Passage] = field(default_factory=list)  # fused, capped, live-checked, screened
    reranked: list[Passage] = field(default_factory=list)  # the top passages after rerank
    sources: list[Passage] = field(default_factory=list)  # the numbered sources after expansion
    drafted: list[Passage] = field(default_factory=list)  # sources the generator's draft cited
    routed: bool = False  # the router answered (refused) before retrieval
    screened: list[Passage] = field(default_factory=list)  # dropped by the planted-instruction screen
    prompt: dict[str, Any] | None = None  # what the budgeted prompt held (prompt_report)
    draft: str = ""  # what the generator wrote, before the validator and the verifier (the release gate reads it)


@dataclass(frozen=True)
class PromptInputs:
    """A prompt before assembly: the system text of its path, the task, the conversation so far and
    the user's notes. Single-shot: SYSTEM_PROMPT and the question; a run's synthesis:
    AGENT_SYSTEM_PROMPT, the question and its checklist, the conversation and the notes."""

    task: str
    system: str = SYSTEM_PROMPT
    conversation: tuple[PromptItem, ...] = ()
    notes: tuple[PromptItem, ...] = ()


def prompt_report(prompt: AssembledPrompt) -> dict[str, Any]:
    """Tokens per part, the items each part kept (by label), and what was cut and why."""
    return {"tokens": prompt.tokens, "max_tokens": prompt.max_tokens,
            "parts": {p.name: {"tokens": p.tokens, "kept": list(p.kept)} for p in prompt.parts},
            "cut": prompt.cut_report()}


@dataclass(frozen=True)
class AnswerSettings:
    rerank_candidates: int = 50
    rerank_top_n: int = 8
    rerank_timeout_s: float = 10.0
    log_retention_s: float = 30 * SECONDS_PER_DAY
    expand_acronyms: bool = True

    @classmethod
    def from_config(cls, config) -> "AnswerSettings":
        return cls(config.rerank_candidates, config.rerank_top_n, config.rerank_timeout_s,
                   config.answer_log_retention_days * SECONDS_PER_DAY, config.expand_acronyms)


class QueryVectorMemo:
    """Wraps an Embedder and remembers recent query vectors, so the gate can score the question
    against the passages without embedding it a second time."""

    def __init__(self, inner, capacity: int = QUERY_MEMO_CAPACITY):
        self._inner = inner
        self._capacity = capacity
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        # Read through, not copied: a remote embedder learns its model id on first use.
        return self._inner.model_id

    @property
    def dim(self) -> int:
        return self._inner.dim

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._inner.embed_passages(texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        vectors = self._inner.embed_queries(texts)
        for text, vector in zip(texts, vectors):
            self.remember(text, vector)
        return vectors

    def remember(self, text: str, vector: np.ndarray) -> None:
        """Record a query vector computed elsewhere (a retriever in another process)."""
        with self._lock:
            self._vectors[text] = vector
            self._vectors.move_to_end(text)
            while len(self._vectors) > self._capacity:
                self._vectors.popitem(last=False)

    def recall(self, text: str) -> np.ndarray | None:
        with self._lock:
            return self._vectors.get(text)

    def vectors(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Each text's vector: remembered ones recalled, the rest embedded in one batch (and remembered).
        The gate's word embeddings (citadel/answer/semantic.py) come from a memo of their own."""
        known = {text: vector for text in texts if (vector := self.recall(text)) is not None}
        missing = [text for text in dict.fromkeys(texts) if text not in known]
        if missing:
            known.update(zip(missing, self.embed_queries(missing)))
        return known


class StageTimer:
    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._started = time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.ms[name] = round(self.ms.get(name, 0.0) + (time.perf_counter() - started) * 1000.0, 3)

    def total(self) -> dict[str, float]:
        return {**self.ms, "total": round((time.perf_counter() - self._started) * 1000.0, 3)}


class AnswerService:
    def __init__(self, retriever, partitions: PartitionCache, reranker: Reranker, gate: ConfidenceGate | CalibratedGate,
                 generator: Generator, catalog: Catalog, settings: AnswerSettings | None = None,
                 expander: SectionExpander | None = None, validator: AnswerValidator | None = None,
                 router: QuestionRouter | None = None, passage_filter: Callable[[Passage], bool] | None = None,
                 query_vectors: QueryVectorMemo | None = None, word_vectors: QueryVectorMemo | None = None,
                 assembler: PromptAssembler | None = None, paused: Callable[[str, str], bool] | None = None,
                 reader=None, confirm_settings: ConfirmSettings | None = None, links: LinkPolicy | None = None,
                 flagged: Callable[[str, Sequence[Passage]], None] | None = None, bundle_id: str | None = None,
                 verifier=None, personal_data: PersonalDataMasker | None = None, prompt_vault=None,
                 signals=None):
        """`assembler`: builds the budgeted prompt of every answer, single-shot and a run's synthesis
        (`compose_from`); by default from the generator's own token count and the default allowances
        and instruction. `passage_filter`: the one planted-instruction screen
        (citadel/guardrails/planted.py) every retrieved passage and every expanded section passes
        before a prompt; `flagged(tenant, passages)`: told what it dropped (the documents' owners get a
        review task); `links`: what an answer may link to (by default nothing: images, HTML and links
        leave no answer); `bundle_id`: the config bundle every answer names (citadel/quality/bundle.py); `verifier`: the claim verifier every generated answer passes
        (citadel/quality/verifier.py; None: the validator alone); `personal_data`: masks the answer log
        (the wiring's knows the catalog's users; default the patterns alone); `prompt_vault`: where what
        the generator was sent and returned is kept, encrypted (None: not kept)."""
        self.retriever = retriever
        self.partitions = partitions
        self.reranker = reranker
        self.gate = gate
        self.generator = generator
        self.catalog = catalog
        self.settings = settings or AnswerSettings()
        self.expander = expander or SectionExpander()
        self.validator = validator or AnswerValidator()
        self.router = router
        self.passage_filter = passage_filter
        self.query_vectors = query_vectors
        self.word_vectors = word_vectors
        self._fallback_generator = ExtractiveGenerator()
        self.assembler = assembler or PromptAssembler.for_generator(generator, AgentConfig())
        # `paused(tenant, "model")`: an admin's pause switch; a paused model answers with quotes.
        self.paused = paused
        # The reader confirms the asked fact (citadel/answer/confirm.py); None: the gate alone decides.
        self.reader = reader
        self.confirm_settings = confirm_settings or ConfirmSettings()
        self.links = links or LinkPolicy()
        self.flagged = flagged
        # The claim verifier (citadel/quality/verifier.py) every generated answer passes after the
        # validator (a ClaimVerifier; None: the validator alone).
        self.verifier = verifier
        self.bundle_id = bundle_id
        self._rerank_pool = concurrent.futures.ThreadPoolExecutor(RERANK_WORKERS, thread_name_prefix="rerank")
        self._last_purge: float | None = None
        self.personal_data = personal_data or PATTERNS_ONLY
        self.prompt_vault = prompt_vault
        # The signals without labels (citadel/quality/signals.py: QualitySignals) every logged answer is
        # observed for: a rephrase of the user's previous question is marked in its log entry. None: not observed.
        self.signals = signals

    @property
    def router(self) -> QuestionRouter:
        return self._router

    @router.setter
    def router(self, router: QuestionRouter | None) -> None:
        """None means no routing step: every question goes on (AllowAllRouter), so `ask` always
        has one typed decision to read."""
        self._router = router or AllowAllRouter()

    # ------------------------------------------------------------------ the request
    def ask(self, principal: Principal, question: str, request_id: str | None = None,
            correlation_id: str | None = None) -> AnswerResponse:
        """`request_id`: the server's id of the request (a fresh one when None); `correlation_id`: the
        client's own id, kept in the answer log beside it."""
        request_id = request_id or uuid.uuid4().hex
        timer = StageTimer()
        with timer.stage("route"):
            route = self.router.route(question)
        if route.refused:
            response = AnswerResponse(request_id, route.reply or "", True, route.reason, [], [],
                                      trace=AnswerTrace(routed=True))
            return self._finish(principal, question, response, timer, {"router": True}, correlation_id)
        if not content_terms(question):  # "", "?", "what is it": nothing to search for, ask what is meant
            response = AnswerResponse(request_id, clarifying_question([]), True, NEEDS_CLARIFICATION, [], [],
                                      trace=AnswerTrace())
            return self._finish(principal, question, response, timer, {}, correlation_id)
        degraded: list[str] = []
        partition = self.partitions.get(principal.tenant_id)
        query = self.search_query(question, partition, self.settings.expand_acronyms)
        trace = AnswerTrace(query)
        passages, dropped = self._candidates(principal, query, request_id, timer, degraded)
        trace.candidates, trace.screened = passages, dropped
        with timer.stage("rerank"):
            passages, reranked = self._rerank(question, passages, degraded)
        trace.reranked = passages
        decision = self._gate(query, passages, partition, reranked, timer)
        log_extra: dict[str, Any] = {"dropped_passages": [p.chunk_id for p in dropped], "gate": decision.to_dict(),
                                     "reranker": self.reranker.model_id}
        if query != question:
            log_extra["search_query"] = query
        if self.reader is not None and decision.outcome != CLARIFY and self._on_topic(decision):
            response = self._confirmed_answer(principal, question, query, passages, partition, request_id, degraded,
                                              timer, trace, log_extra, decision)
            return self._finish(principal, question, response, timer, log_extra, correlation_id)
        if not decision.passed:
            reply = (clarifying_question(passages[: self.gate.thresholds.passages]) if decision.outcome == CLARIFY
                     else REFUSAL_REPLIES[decision.reason])
            response = AnswerResponse(request_id, reply, True, decision.reason, degraded, [], passages=passages,
                                      gate=decision, trace=trace)
            return self._finish(principal, question, response, timer, log_extra, correlation_id)
        response = self._grounded_answer(principal, query, passages, partition, request_id, degraded, timer,
                                         trace, log_extra, decision)
        return self._finish(principal, question, response, timer, log_extra, correlation_id)

    def _on_topic(self, decision: GateDecision) -> bool:
        """Whether retrieval found the topic at all: the gate passed, or a top passage covers enough of
        the question's words, or is close enough in meaning (looser than answering on purpose: nothing
        unconfirmed is asserted, and a question in the user's own words shares few words with the
        section that answers it)."""
        if decision.passed:
            return True
        signals = decision.signals
        if signals is None:
            return False
        settings = self.confirm_settings
        if max(signals.lexical, signals.semantic) >= settings.topic_coverage:
            return True
        return decision.vector_score is not None and decision.vector_score >= settings.topic_vector

    def _confirmed_answer(self, principal: Principal, question: str, query: str, passages: list[Passage],
                          partition: Partition | None, request_id: str, degraded: list[str], timer: StageTimer,
                          trace: AnswerTrace, log_extra: dict[str, Any], decision: GateDecision) -> AnswerResponse:
        """The topic is found: expand, then assert only a confirmed fact; otherwise reply not_confirmed
        with the closest sections (asserting nothing)."""
        with timer.stage("expand"):
            sources = self._expand(passages, partition, trace)
        with timer.stage("confirm"):
            try:
                confirmation = confirm(self.reader, query, sources, self.confirm_settings, decision.passed)
            except Exception:  # the reader failed: nothing can be confirmed, so nothing is asserted
                degraded.append(Degradation.READER_SKIPPED)
                confirmation = None
        summary = confirmation.to_dict() if confirmation is not None else None
        if summary is not None:
            log_extra["confirm"] = summary
        if confirmation is not None and confirmation.confirmed:
            response = self._grounded_answer(principal, query, passages, partition, request_id, degraded, timer,
                                             trace, log_extra, decision, sources=sources)
        else:
            trace.sources = [s.passage for s in sources]
            response = self._not_confirmed(request_id, question, sources, confirmation, passages, degraded, decision,
                                           trace)
        if confirmation is not None:
            response.confirmation = {**summary, "sentences": confirmation.sentence_rows(sources),
                                     "sources": [{"number": s.number, "document_id": s.passage.document_id,
                                                  "heading": s.passage.heading} for s in sources]}
        return response

    def _not_confirmed(self, request_id: str, question: str, sources: Sequence[Source],
                       confirmation: Confirmation | None, passages: list[Passage], degraded: list[str],
                       decision: GateDecision, trace: AnswerTrace) -> AnswerResponse:
        """Nothing asserted: the closest sentence quoted verbatim with its marker, the closest sections
        cited (renumbered 1..n in order), and the offer of a person."""
        closest = confirmation.best if confirmation is not None else None
        numbers = list(dict.fromkeys(([closest.source_number] if closest is not None else [])
                                     + [s.number for s in sources]))[:CLOSEST_SECTIONS]
        slot = confirmation.slot if confirmation is not None else asked_slot(question)
        reply = not_confirmed_reply(slot, closest, numbers)
        mapping = {number: index for index, number in enumerate(numbers, start=1)}
        by_number = {s.number: s for s in sources}
        citations = [by_number[n].citation(closest.text if closest is not None and closest.source_number == n
                                           else None) for n in numbers]
        trace.drafted = [by_number[n].passage for n in numbers]
        return AnswerResponse(request_id, renumber_markers(reply, mapping), True, NOT_CONFIRMED, degraded, citations,
                              passages=passages, gate=decision, trace=trace)

    def compose_from(self, principal: Principal, question: str, passages: Sequence[Passage],
                     request_id: str | None = None, task: str | None = None,
                     conversation: Sequence[PromptItem] = (), notes: Sequence[PromptItem] = (),
                     asked: str | None = None,
                     lead: Callable[[Sequence[Source]], Any] | None = None) -> AnswerResponse:
        """Answer `question` from passages gathered elsewhere (an agentic run's evidence, in the order
        to number them) through the same expand → generate → validate → conflicts → compose stages
        and answer log as `ask`. No retrieval and no gate: a run answers with what it found, so only
        an empty evidence list is refused. Each passage is re-checked live first (a document revoked
        or republished since the step that found it is dropped). `task`: what the generator is asked
        to cover, when more than the question (a run's question and its checklist, one per line).
        The generator gets the budgeted prompt (`PromptAssembler`): the conversation so far and the
        user's notes (already live-checked by the caller), the sources tagged with status and
        effective date, the task last; what went in and what was cut is in `trace.prompt`. `asked`: what
        the generator is asked to answer when it is less than the question (a run's confirmed parts); the
        answer log keeps the question. `lead(sources)`: a sentence code computes from the numbered
        sources, to open the answer (a run's decision, citadel/agent/decision.py: `.text` with its
        markers, `.computed` what code derived for it), or None; it is checked like the draft."""
        request_id = request_id or uuid.uuid4().hex
        timer = StageTimer()
        with timer.stage("recheck"):
            live = self.catalog.readable_documents(principal)
            passages = [p for p in passages
                        if (doc := live.get(p.document_id)) is not None and doc.version == p.version]
            passages, screened = self.screen(passages)  # gathered elsewhere: screened here as well
        partition = self.partitions.get(principal.tenant_id)
        query = self.search_query(asked or question, partition, self.settings.expand_acronyms)
        trace = AnswerTrace(query, candidates=list(passages), reranked=list(passages), screened=screened)
        if not passages:
            response = AnswerResponse(request_id, REFUSAL_REPLIES[NO_ELIGIBLE_SOURCE], True, NO_ELIGIBLE_SOURCE, [],
                                      [], trace=trace)
            return self._finish(principal, question, response, timer, {"composed": True})
        log_extra: dict[str, Any] = {"composed": True}
        prompt = PromptInputs(f"{query}\n{task}" if task else query, AGENT_SYSTEM_PROMPT, tuple(conversation),
                              tuple(notes))
        response = self._grounded_answer(principal, query, list(passages), partition, request_id, [], timer, trace,
                                         log_extra, prompt=prompt, lead=lead)
        return self._finish(principal, question, response, timer, log_extra)

    def _grounded_answer(self, principal: Principal, query: str, passages: list[Passage], partition: Partition | None,
                         request_id: str, degraded: list[str], timer: StageTimer, trace: AnswerTrace,
                         log_extra: dict[str, Any], decision: GateDecision | None = None,
                         prompt: PromptInputs | None = None, sources: list[Source] | None = None,
                         lead: Callable[[Sequence[Source]], Any] | None = None) -> AnswerResponse:
        """Expand → assemble → generate → validate → conflicts → compose over passages already admitted
        (by the gate, or as a run's evidence); what it did goes into `log_extra` for the answer log.
        The generator gets the budgeted prompt (`prompt`: a run's synthesis; None: the single-shot
        one, the question under SYSTEM_PROMPT) and from here on only the sources it kept count: a
        source cut from the prompt can be neither cited nor validated against."""
        if sources is None:
            with timer.stage("expand"):
                sources = self._expand(passages, partition, trace)
        prompt = prompt or PromptInputs(query)
        with timer.stage("assemble"):
            records = source_records(self.catalog, principal.tenant_id, sources)
            assembled = self.assembler.assemble(prompt.task, sources, records, notes=prompt.notes,
                                                conversation=prompt.conversation, system_prompt=prompt.system)
        sources = list(assembled.sources)
        trace.prompt = prompt_report(assembled)
        trace.sources = [s.passage for s in sources]
        with timer.stage("generate"):
            draft, model_id, prompt_tokens = self._generate(prompt.task, sources, degraded, assembled,
                                                            principal.tenant_id)
        trace.draft = draft
        self._keep_prompt(request_id, principal, prompt.task, assembled, draft)
        opening = lead(sources) if lead is not None else None
        if opening is not None:  # code's sentence first, then the draft; both pass the checks below
            draft = f"{opening.text}\n{draft}"
        by_number = {s.number: s.passage for s in sources}
        trace.drafted = [by_number[n] for n in dict.fromkeys(marker_numbers(draft)) if n in by_number]
        recomputed = None
        if self.verifier is not None:  # derived figures first: the validator drops figures sources lack
            with timer.stage("verify"):
                recomputed = self.verifier.recompute(draft, sources)
        with timer.stage("validate"):
            support = self._claim_support(partition, sources) if partition is not None else None
            computed = dict(recomputed.computed) if recomputed else {}
            if opening is not None:  # what the lead's code derived is evidence for its figures, as the verifier's
                key = strip_markers(opening.text).lower()
                computed[key] = f"{computed.get(key, '')} {opening.computed}".strip()
            validated = self.validator.validate(query, recomputed.text if recomputed else draft, sources, support,
                                                computed)
        verification = self._verify(query, validated, sources, recomputed, degraded, timer)
        with timer.stage("validate"):
            conflicts = self._topical_conflicts(query, sources, partition, records)
            answer, citations, conflict_dicts = compose(validated, sources, conflicts)
        log_extra.update(model_id=model_id, sources=[_source_log(s) for s in sources],
                         validation={"fallback": validated.fallback, "removed": validated.removed})
        if verification is not None:
            log_extra["verification"] = verification
        if prompt_tokens is not None:
            log_extra["prompt_tokens"] = trace.prompt["prompt_tokens"] = prompt_tokens
        return AnswerResponse(request_id, answer, False, None, degraded, citations, conflict_dicts,
                              passages=passages, gate=decision, trace=trace,
                              invalid_markers=validated.removed["markers"], verification=verification,
                              prompt_tokens=prompt_tokens)

    def _verify(self, query: str, validated: ValidatedAnswer, sources: Sequence[Source], recomputed,
                degraded: list[str], timer: StageTimer) -> dict | None:
        """The claim verifier over the validated answer (in place): what it removed leaves the text and
        its citations; when nothing is left, the top evidence is quoted (a quote is its own support).
        A judge that failed or ran out of time is a visible downgrade; the answer still leaves."""
        if self.verifier is None:
            return None
        with timer.stage("verify"):
            verification = self.verifier.verify(validated.text, sources, recomputed)
            if verification.judge_skipped:
                degraded.append(Degradation.VERIFIER_SKIPPED)
            if verification.text != validated.text:
                validated.text = verification.text
                validated.used = list(dict.fromkeys(n for n in marker_numbers(verification.text)
                                                    if n in validated.used))
                if not validated.used:
                    self.validator.fallback(query, sources, validated)
            return verification.to_dict(sources)

    # ------------------------------------------------------------------ stages
    @staticmethod
    def search_query(question: str, partition: Partition | None, expand_acronyms: bool = True) -> str:
        """The question in the words the tenant's documents (`partition`) use: period shorthand spelled
        out ("Q2 of FY2024" → "second quarter of fiscal 2024"), closed compounds the documents only
        write as two words split ("cashflow" → "cash flow"), and each acronym the documents define
        followed by its long form ("PTO (paid time off)") and back. Retrieval, the gate and the
        generator all read this text, so they agree on its terms; the answer log keeps the question."""
        query = spell_out_shorthand(question)
        if partition is None:
            return query
        idf = term_idf(partition)
        query = decompound(query, lambda term: term in idf.idf)
        return glossary_of(partition).expand(query) if expand_acronyms else query

    def _candidates(self, principal: Principal, question: str, request_id: str, timer: StageTimer,
                    degraded: list[str]) -> tuple[list[Passage], list[Passage]]:
        started = time.perf_counter()
        result = self.retriever.retrieve(principal, question, top_k=self.settings.rerank_candidates,
                                         request_id=request_id)
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        embed_ms = float(result.timings_ms.get("embed_ms", 0.0))
        timer.ms["embed"] = round(embed_ms, 3)
        timer.ms["search"] = round(max(elapsed_ms - embed_ms, 0.0), 3)
        degraded.extend(d for d in result.degraded if d not in degraded)
        with timer.stage("screen"):
            return self.screen(result.passages)

    def screen(self, passages: Sequence[Passage]) -> tuple[list[Passage], list[Passage]]:
        """(kept, dropped) by the planted-instruction screen; all kept without one."""
        return split_screened(passages, self.passage_filter)

    def _expand(self, passages: list[Passage], partition: Partition | None, trace: AnswerTrace) -> list[Source]:
        """The numbered sources, each expanded section screened like a retrieved passage: expansion
        adds text retrieval never returned (the rest of a section, its siblings), and a section that
        carries planted instructions is dropped whole, the rest renumbered 1..n."""
        sources = self.expander.expand(passages, partition)
        if self.passage_filter is None:
            return sources
        kept: list[Source] = []
        for source in sources:
            expanded = source.passage if source.text == source.passage.text else replace(source.passage,
                                                                                           text=source.text)
            if self.passage_filter(expanded):
                trace.screened.append(source.passage)
            else:
                kept.append(replace(source, number=len(kept) + 1))
        return kept

    def _rerank(self, question: str, passages: list[Passage], degraded: list[str]) -> tuple[list[Passage], bool]:
        """(top passages, whether a reranker actually reordered them)."""
        top_n = self.settings.rerank_top_n
        if not self.reranker.enabled:
            degraded.append(Degradation.RERANK_SKIPPED)  # disabled is reported like slow or failing
            return passages[:top_n], False
        if not passages:
            return [], False
        future = self._rerank_pool.submit(self.reranker.rerank, question, passages, top_n)
        try:
            return future.result(timeout=self.settings.rerank_timeout_s), True
        except Exception:  # timeout or model failure: fail open with the fused order, visibly
            future.cancel()
            degraded.append(Degradation.RERANK_SKIPPED)
            return passages[:top_n], False

    def _gate(self, question: str, passages: list[Passage], partition: Partition | None,
              reranked: bool, timer: StageTimer) -> GateDecision:
        """`question`: the search query (its vector is the one the retriever remembered). The words'
        embeddings (stage `semantic`) are timed apart from the decision itself (stage `gate`)."""
        if not passages or partition is None:
            return GateDecision(False, NO_ELIGIBLE_SOURCE)
        top = passages[: self.gate.thresholds.passages]
        vector_scores = matches = None
        query_vector = self.query_vectors.recall(question) if self.query_vectors is not None else None
        if query_vector is not None:
            rows = layout_of(partition).row_of_chunk
            top = [p for p in top if p.chunk_id in rows]  # a publish landed mid-request: score what is there
            vector_scores = cosine_scores(partition, top, query_vector, rows)
            if self.word_vectors is not None and top and self.gate.reads_word_matches:
                with timer.stage("semantic"):
                    matches = self._term_matches(question, partition, top, rows)
        rerank_score = passages[0].score if reranked else None
        with timer.stage("gate"):
            if not top:
                return GateDecision(False, NO_ELIGIBLE_SOURCE)
            return self.gate.check(question, top, term_idf(partition), vector_scores, rerank_score, matches,
                                   glossary_of(partition), partition.manifest.model_id)

    def _claim_support(self, partition: Partition, sources: Sequence[Source]) -> ClaimSupport | None:
        """Support by meaning for the validator: each source's hit passage's stored vector (read only
        if a claim needs it)."""
        if self.word_vectors is None:
            return None

        def source_vectors() -> dict[int, np.ndarray]:
            rows = layout_of(partition).row_of_chunk
            numbered = [(s.number, rows[s.passage.chunk_id]) for s in sources if s.passage.chunk_id in rows]
            vectors = partition.vectors_at([row for _, row in numbered]) if numbered else []
            return {number: vectors[i] for i, (number, _) in enumerate(numbered)}

        return ClaimSupport(self.word_vectors, source_vectors)

    def _term_matches(self, question: str, partition: Partition, top: list[Passage],
                      rows: dict[str, int]) -> list[dict[str, float]] | None:
        """Semantic matches fail open: without them the gate still has its other signals."""
        try:
            return term_matches(question, partition.vectors_at([rows[p.chunk_id] for p in top]), self.word_vectors)
        except Exception:
            return None

    def _generate(self, question: str, sources: Sequence[Source], degraded: list[str], prompt: AssembledPrompt,
                  tenant_id: str) -> tuple[str, str, dict[str, int] | None]:
        """(text, model id, the prompt's cached and uncached tokens where the backend said them)."""
        if self.paused is not None and self.paused(tenant_id, MODEL_TARGET):
            return self._quoted(question, sources, prompt, degraded, Degradation.MODEL_PAUSED)
        try:
            # A composite generator (primary, then secondary) names the backend that answered.
            text, model_id, downgrades = self.generator.generate_with_status(question, sources, prompt)
        except Exception:  # any backend failure: the deterministic quotes still answer, visibly
            return self._quoted(question, sources, prompt, degraded, Degradation.GENERATOR_FALLBACK)
        degraded.extend(downgrades)
        return text, model_id, prompt_token_counts(self.generator)  # read on this thread, right after its call

    def _quoted(self, question: str, sources: Sequence[Source], prompt: AssembledPrompt, degraded: list[str],
                why: Degradation) -> tuple[str, str, None]:
        """The extractive generator's quotes instead of the model's answer, and the reason, visibly."""
        degraded.append(why)
        return self._fallback_generator.generate(question, sources, prompt), self._fallback_generator.model_id, None

    def _topical_conflicts(self, question: str, sources: Sequence[Source], partition: Partition | None,
                           records: dict) -> list[Conflict]:
        """Conflicts between sources that both address the question: an older edition retrieved
        for some other section is not a conflict about this answer, just noise. `records`: the
        sources' catalog records (`source_records`)."""
        conflicts = detect_conflicts(sources, records)
        if not conflicts or partition is None:
            return conflicts
        idf, question_terms = term_idf(partition), set(content_terms(question))
        threshold = self.gate.thresholds.min_coverage
        on_topic = {s.number for s in sources if weighted_coverage(question_terms, source_terms(s), idf) >= threshold}
        return [c for c in conflicts if set(c.source_numbers) <= on_topic]

    # ------------------------------------------------------------------ logging
    def _finish(self, principal: Principal, question: str, response: AnswerResponse, timer: StageTimer,
                extra: dict[str, Any], correlation_id: str | None = None) -> AnswerResponse:
        """The last step of every answer: the screened sources named and reported, the links policy
        applied, the row logged."""
        screened = response.trace.screened if response.trace is not None else []
        if screened:
            response.answer = with_screened_notice(response.answer)
            if self.flagged is not None:
                self.flagged(principal.tenant_id, screened)
        response.answer = self.links.clean(response.answer, principal.tenant_id)
        response.timings_ms = timer.total()
        response.bundle_id = self.bundle_id
        entry = {**response.to_dict(), "conflicts": response.conflicts, "prompt_version": PROMPT_VERSION,
                 "model_id": extra.pop("model_id", None),
                 "passages": [{"chunk_id": p.chunk_id, "document_id": p.document_id, "version": p.version,
                               "score": round(float(p.score), 6)} for p in response.passages],
                 "timings_ms": response.timings_ms, **extra}
        searched = response.trace.search_query if response.trace is not None else ""
        entry.update(self._observe_signals(principal, response.request_id, searched, entry))
        self._log(principal, question, entry, response.request_id, correlation_id, cached=False)
        return response

    def log_cache_hit(self, principal: Principal, question: str, body: dict[str, Any],
                      correlation_id: str | None = None) -> None:
        """A cached answer served (by the gateway) is logged like any other: the audit is complete."""
        entry = {k: body.get(k) for k in ("request_id", "answer", "refused", "reason", "degraded", "citations",
                                             "bundle_id")}
        entry["outcome"] = body.get("outcome") or outcome_of(bool(body.get("refused")), body.get("reason"))
        entry.update(self._observe_signals(principal, body["request_id"], question, entry))
        self._log(principal, question, entry, body["request_id"], correlation_id, cached=True)

    def _observe_signals(self, principal: Principal, request_id: str, searched: str,
                         entry: dict[str, Any]) -> dict[str, Any]:
        """The fields the signals add to the log entry (`rephrase_of`). `searched`: what was searched for
        (empty: the router or the clarifying question answered, no question about the documents to
        observe); its vector is the one the retrieval left in the query-vector memo, so the rephrase
        check costs no embedding on that path."""
        if self.signals is None or not searched:
            return {}
        vector = self.query_vectors.recall(searched) if self.query_vectors is not None else None
        return self.signals.observe(principal.tenant_id, principal.user_id, request_id, searched, entry, vector)

    def _log(self, principal: Principal, question: str, entry: dict[str, Any], request_id: str,
             correlation_id: str | None, cached: bool) -> None:
        """Append the row; a question with sensitive data is withheld (the refusal promised so), and
        with it whatever was derived from its words (the search query, the gate's missing terms)."""
        logged = loggable_question(question, entry.get("reason"))
        if logged != question:
            entry = withheld_entry(entry)
        else:  # personal data is masked, the rest of the question kept
            logged, entry = masked_record(question, entry, self.personal_data)
        self.catalog.log_answer(request_id, principal.tenant_id, principal.user_id, logged, entry,
                                correlation_id=correlation_id, cached=cached)
        self._maybe_purge()

    def _keep_prompt(self, request_id: str, principal: Principal, question: str, prompt: AssembledPrompt,
                     reply: str) -> None:
        """Keep what the generator was sent and returned, encrypted, for investigation. Never a question
        holding a card number or a secret (the reply promised it was not stored); a vault that fails
        costs the record, never the answer."""
        if self.prompt_vault is None or sensitive_data_kind(question):
            return
        try:
            self.prompt_vault.put(request_id, principal.tenant_id, principal.user_id, prompt.messages(), reply)
        except Exception as error:
            log.warning("prompt not kept for request %s: %s", request_id, type(error).__name__)

    def _maybe_purge(self) -> None:
        now = time.monotonic()
        if self._last_purge is not None and now - self._last_purge < PURGE_INTERVAL_S:
            return
        self._last_purge = now
        self.catalog.purge_answers(self.settings.log_retention_s)


def compose(validated: ValidatedAnswer, sources: Sequence[Source],
            conflicts: Sequence[Conflict]) -> tuple[str, list[dict], list[dict]]:
    """Answer text with conflict notes, markers renumbered 1..n in order of first use, and the
    matching citations. A conflict that touches a used source is noted, and both of its sources
    are cited, so the reader sees each version."""
    used = list(validated.used)
    relevant = [c for c in conflicts if set(c.source_numbers) & set(used)]
    for conflict in relevant:
        used.extend(n for n in conflict.source_numbers if n not in used)
    text = " ".join([validated.text, *(c.note() for c in relevant)]).strip()
    mapping = {number: index for index, number in enumerate(used, start=1)}
    by_number = {s.number: s for s in sources}
    citations = [by_number[n].citation(quoted_sentence(validated.text, by_number[n].text)) for n in used]
    conflict_dicts = [{**c.to_dict(), "detail": renumber_markers(c.detail, mapping)} for c in relevant]
    return renumber_markers(text, mapping), citations, conflict_dicts


def _source_log(source: Source) -> dict:
    p = source.passage
    return {"number": source.number, "chunk_id": p.chunk_id, "document_id": p.document_id,
            "version": p.version, "tokens": source.tokens}
