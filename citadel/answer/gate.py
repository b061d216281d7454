"""The confidence gate (DESIGN.md §4 step 6): refuse before any generation when the top passages
do not cover the question.

Coverage is IDF-weighted: a question term that appears in most chunks ("policy" in a handbook)
weighs little, a rare one ("reimbursement", "kayak") weighs a lot, and a term the tenant's chunks
never contain weighs the most, so a question about something the documents never mention is
refused even when its common words match. Coverage is measured per passage (the best single one
among the top few), because an answer is quoted from one place, not pieced from stray words.
Score thresholds add a semantic check: a question far from every passage in embedding space is
refused, and one very close to a passage (a paraphrase) passes with less literal coverage.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import numpy as np

from citadel.answer.clarify import NEEDS_CLARIFICATION
from citadel.answer.glossary import EMPTY_GLOSSARY, Glossary
from citadel.segments.partition import Partition, SegmentCache, sampled_texts
from citadel.text import content_terms, document_name, term_set
from citadel.types import Passage

LOW_COVERAGE = "low_coverage"
NO_ELIGIBLE_SOURCE = "no_eligible_source"
# IDF over more rows than this uses an evenly strided sample: document frequencies are ratios, and
# a sample of this size estimates them well while keeping the first query on a huge tenant cheap.
IDF_SAMPLE_ROWS = 200_000
# Loaded segments whose IDF table is kept; a new segment id (a new publish) computes a new one.
IDF_CACHE_SEGMENTS = 16


@dataclass(frozen=True)
class TermIdf:
    """BM25-style IDF per term over a partition's chunk texts; unseen terms get `unseen`."""

    idf: dict[str, float]
    unseen: float

    def __getitem__(self, term: str) -> float:
        return self.idf.get(term, self.unseen)


def _bm25_idf(document_frequency: int, total: int) -> float:
    # log(1 + (N - df + 0.5) / (df + 0.5)): positive for every df, largest for df = 0.
    return math.log(1.0 + (total - document_frequency + 0.5) / (document_frequency + 0.5))


def compute_term_idf(texts: Sequence[str]) -> TermIdf:
    frequencies: Counter[str] = Counter()
    for text in texts:
        frequencies.update(term_set(text))
    total = len(texts)
    idf = {term: _bm25_idf(df, total) for term, df in frequencies.items()}
    return TermIdf(idf, _bm25_idf(0, total))


_idf_cache: SegmentCache[TermIdf] = SegmentCache(IDF_CACHE_SEGMENTS)


def term_idf(partition: Partition) -> TermIdf:
    """The partition's term IDF, cached by segment id (segments are immutable)."""
    return _idf_cache.get(partition.segment_id, lambda: _sampled_term_idf(partition))


def _sampled_term_idf(partition: Partition) -> TermIdf:
    return compute_term_idf(sampled_texts(partition, IDF_SAMPLE_ROWS))


@dataclass(frozen=True)
class GateThresholds:
    min_coverage: float = 0.6
    min_vector_score: float = 0.25
    strong_vector_score: float = 0.55
    min_coverage_strong_vector: float = 0.35
    min_rerank_score: float | None = None
    passages: int = 3

    @classmethod
    def from_config(cls, config) -> "GateThresholds":
        return cls(config.min_coverage, config.min_vector_score, config.strong_vector_score,
                   config.min_coverage_strong_vector, config.min_rerank_score, config.gate_passages)


ANSWER, CLARIFY, REFUSE = "answer", "clarify", "refuse"
# A question with fewer distinctive terms than this ("leave?", "") names no fact to look for: the
# gate asks what the user means instead of guessing from whatever matched one word.
MIN_QUESTION_TERMS = 2
# Legs "agree" on a passage both rank this high.
AGREEMENT_RANK = 5


@dataclass(frozen=True)
class GateSignals:
    """What the gate knows about the top passages, each in [0, 1] (see `gate_signals`)."""

    lexical: float  # IDF-weighted share of the question's terms one top passage contains
    semantic: float  # the same, an absent term counting by its embedding's match to the passage
    vector: float  # best cosine of the question to a top passage (0 without the vector leg)
    vector_rank: float  # 1 / best vector-leg rank among the top passages (0: none there)
    keyword_rank: float  # 1 / best keyword-leg rank among the top passages
    agree: float  # 1 when both legs rank one top passage within AGREEMENT_RANK
    unseen: float  # IDF share of the question's terms the tenant's documents never use
    terms: int  # distinct content terms of the question

    FEATURES = ("lexical", "semantic", "vector", "vector_rank", "keyword_rank", "agree", "unseen",
                "question_terms")

    def features(self) -> list[float]:
        return [self.lexical, self.semantic, self.vector, self.vector_rank, self.keyword_rank, self.agree,
                self.unseen, min(self.terms, 12) / 12.0]

    def to_dict(self) -> dict:
        return {name: round(float(value), 4) for name, value in zip(self.FEATURES, self.features())}


@dataclass
class GateDecision:
    passed: bool
    reason: str | None
    coverage: float = 0.0
    vector_score: float | None = None
    rerank_score: float | None = None
    missing_terms: list[str] = field(default_factory=list)
    signals: GateSignals | None = None
    probability: float | None = None  # the calibrated gate's P(the passages answer the question)
    model: str | None = None  # which gate decided (its fitted model's version)

    @property
    def outcome(self) -> str:
        if self.passed:
            return ANSWER
        return CLARIFY if self.reason == NEEDS_CLARIFICATION else REFUSE

    def to_dict(self) -> dict:
        return {"passed": self.passed, "outcome": self.outcome, "reason": self.reason,
                "coverage": round(self.coverage, 4),
                "vector_score": None if self.vector_score is None else round(self.vector_score, 4),
                "rerank_score": self.rerank_score, "missing_terms": self.missing_terms,
                "signals": None if self.signals is None else self.signals.to_dict(),
                "probability": None if self.probability is None else round(self.probability, 4),
                "model": self.model}


def passage_terms(passage: Passage, glossary: Glossary = EMPTY_GLOSSARY) -> set[str]:
    """What a passage covers: its text plus its heading and its document's name (title and file
    name; the title and heading are the context it was embedded with), each acronym the tenant
    defines counting for its long form and back."""
    return glossary.augment(term_set(f"{document_name(passage.title, passage.source)}\n{passage.heading}\n{passage.text}"))


def weighted_coverage(question_terms: set[str], covered: set[str], idf: TermIdf) -> float:
    total = sum(idf[t] for t in question_terms)
    return sum(idf[t] for t in question_terms & covered) / total if total else 0.0


def soft_coverage(question_terms: set[str], covered: set[str], idf: TermIdf, matches: dict[str, float]) -> float:
    """Like `weighted_coverage`, but a term the passage lacks still counts by `matches[term]` (its
    embedding's similarity to the passage, in [0, 1]): "vacation" partly covers a passage on annual leave."""
    total = sum(idf[t] for t in question_terms)
    if not total:
        return 0.0
    return sum(idf[t] * (1.0 if t in covered else matches.get(t, 0.0)) for t in question_terms) / total


def _inverse_rank(ranks: Sequence[int | None]) -> float:
    present = [r for r in ranks if r]
    return 1.0 / min(present) if present else 0.0


def gate_signals(question_terms: set[str], top: Sequence[Passage], idf: TermIdf,
                 vector_scores: Sequence[float] | None = None,
                 term_matches: Sequence[dict[str, float]] | None = None,
                 glossary: Glossary = EMPTY_GLOSSARY) -> tuple[GateSignals, set[str]]:
    """The signals over the top passages, and the question terms the lexically best one covers.

    `vector_scores[i]`: cosine of the question to `top[i]`; `term_matches[i]`: per question term, its
    similarity to `top[i]` through the embedder (both absent when the vector leg did not run)."""
    question_terms = glossary.augment(question_terms) if question_terms else question_terms
    lexical, semantic, best_terms = 0.0, 0.0, set()
    for index, passage in enumerate(top):
        terms = passage_terms(passage, glossary)
        score = weighted_coverage(question_terms, terms, idf)
        if score > lexical:
            lexical, best_terms = score, terms & question_terms
        matches = term_matches[index] if term_matches and index < len(term_matches) else {}
        semantic = max(semantic, soft_coverage(question_terms, terms, idf, matches))
    total_idf = sum(idf[t] for t in question_terms)
    unseen = sum(idf[t] for t in question_terms if t not in idf.idf) / total_idf if total_idf else 0.0
    agree = any(p.vector_rank and p.keyword_rank and max(p.vector_rank, p.keyword_rank) <= AGREEMENT_RANK
                for p in top)
    signals = GateSignals(lexical, semantic, max(vector_scores) if vector_scores else 0.0,
                          _inverse_rank([p.vector_rank for p in top]), _inverse_rank([p.keyword_rank for p in top]),
                          float(agree), unseen, len(question_terms))
    return signals, best_terms


class Assessment(NamedTuple):
    """What both gates read before deciding: the signals, the question terms the best passage
    lacks, and whether the question names a fact at all (MIN_QUESTION_TERMS)."""

    signals: GateSignals
    missing: list[str]
    names_a_fact: bool


def assess(question: str, top: Sequence[Passage], idf: TermIdf, vector_scores: Sequence[float] | None,
           term_matches: Sequence[dict[str, float]] | None, glossary: Glossary) -> Assessment:
    question_terms = set(content_terms(question))
    signals, best_terms = gate_signals(question_terms, top, idf, vector_scores, term_matches, glossary)
    return Assessment(signals, sorted(question_terms - best_terms), len(question_terms) >= MIN_QUESTION_TERMS)


class ConfidenceGate:
    """The hand-set gate (the default): lexical coverage and cosine thresholds (GateThresholds). It
    also decides for the calibrated gate (citadel/answer/gate_model.py) where its fitted model does
    not apply (another embedder, keyword-only retrieval)."""

    reads_word_matches = False  # it never reads `term_matches`: the service need not embed the words

    def __init__(self, thresholds: GateThresholds | None = None):
        self.thresholds = thresholds or GateThresholds()

    def check(self, question: str, passages: Sequence[Passage], idf: TermIdf,
              vector_scores: Sequence[float] | None = None, rerank_score: float | None = None,
              term_matches: Sequence[dict[str, float]] | None = None,
              glossary: Glossary = EMPTY_GLOSSARY, embedding_model: str | None = None) -> GateDecision:
        """Decide whether the top passages can answer `question`.

        `vector_scores`: cosine of the question to each passage (same order), when the vector leg ran.
        `rerank_score`: the best calibrated rerank score, when a reranker ran.
        `embedding_model`: the passages' embedder (the hand-set thresholds apply to any).
        """
        if not passages:
            return GateDecision(False, NO_ELIGIBLE_SOURCE)
        top = list(passages[: self.thresholds.passages])
        signals, missing, names_a_fact = assess(question, top, idf, vector_scores, term_matches, glossary)
        vector = max(vector_scores[: len(top)]) if vector_scores else None
        if not names_a_fact:
            return GateDecision(False, NEEDS_CLARIFICATION, signals.lexical, vector, rerank_score, missing, signals,
                                model="thresholds")
        passed = self._passes(signals.lexical, vector, rerank_score)
        return GateDecision(passed, None if passed else LOW_COVERAGE, signals.lexical, vector, rerank_score, missing,
                            signals, model="thresholds")

    def _passes(self, coverage: float, vector: float | None, rerank_score: float | None) -> bool:
        limits = self.thresholds
        if limits.min_rerank_score is not None and rerank_score is not None and rerank_score < limits.min_rerank_score:
            return False
        if vector is None:  # keyword-only retrieval: coverage alone decides
            return coverage >= limits.min_coverage
        if vector < limits.min_vector_score:
            return False
        if coverage >= limits.min_coverage:
            return True
        return vector >= limits.strong_vector_score and coverage >= limits.min_coverage_strong_vector


def cosine_scores(partition: Partition, passages: Sequence[Passage], query_vector: np.ndarray,
                  rows_by_chunk: dict[str, int]) -> list[float]:
    """Cosine of the (normalised) query vector to each passage's stored (normalised) vector.
    Passages the segment does not hold (a publish landed mid-request) are left out."""
    rows = [rows_by_chunk[p.chunk_id] for p in passages if p.chunk_id in rows_by_chunk]
    if not rows:
        return []
    vectors = partition.vectors_at(rows)
    return [float(s) for s in vectors @ np.asarray(query_vector, dtype=np.float32).reshape(-1)]
