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
from typing import Sequence

import numpy as np

from citadel.answer.text import content_terms, document_name, term_set
from citadel.partition import Partition, SegmentCache
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
    texts = partition.table.column("text").to_pylist()
    if len(texts) > IDF_SAMPLE_ROWS:
        stride = len(texts) / IDF_SAMPLE_ROWS
        texts = [texts[int(i * stride)] for i in range(IDF_SAMPLE_ROWS)]
    return compute_term_idf(texts)


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


@dataclass
class GateDecision:
    passed: bool
    reason: str | None
    coverage: float = 0.0
    vector_score: float | None = None
    rerank_score: float | None = None
    missing_terms: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"passed": self.passed, "reason": self.reason, "coverage": round(self.coverage, 4),
                "vector_score": None if self.vector_score is None else round(self.vector_score, 4),
                "rerank_score": self.rerank_score, "missing_terms": self.missing_terms}


def passage_terms(passage: Passage) -> set[str]:
    """What a passage covers: its text plus its heading and its document's name (title and file
    name; the title and heading are the context it was embedded with)."""
    return term_set(f"{document_name(passage.title, passage.source)}\n{passage.heading}\n{passage.text}")


def weighted_coverage(question_terms: set[str], covered: set[str], idf: TermIdf) -> float:
    total = sum(idf[t] for t in question_terms)
    return sum(idf[t] for t in question_terms & covered) / total if total else 0.0


class ConfidenceGate:
    def __init__(self, thresholds: GateThresholds | None = None):
        self.thresholds = thresholds or GateThresholds()

    def check(self, question: str, passages: Sequence[Passage], idf: TermIdf,
              vector_scores: Sequence[float] | None = None, rerank_score: float | None = None) -> GateDecision:
        """Decide whether the top passages can answer `question`.

        `vector_scores`: cosine of the question to each passage (same order), when the vector leg ran.
        `rerank_score`: the best calibrated rerank score, when a reranker ran.
        """
        if not passages:
            return GateDecision(False, NO_ELIGIBLE_SOURCE)
        top = list(passages[: self.thresholds.passages])
        question_terms = set(content_terms(question))
        coverage, best_terms = self._best_coverage(question_terms, top, idf)
        missing = sorted(question_terms - best_terms)
        vector = max(vector_scores[: len(top)]) if vector_scores else None
        passed = bool(question_terms) and self._passes(coverage, vector, rerank_score)
        return GateDecision(passed, None if passed else LOW_COVERAGE, coverage, vector, rerank_score, missing)

    @staticmethod
    def _best_coverage(question_terms: set[str], top: list[Passage], idf: TermIdf) -> tuple[float, set[str]]:
        best, best_terms = 0.0, set()
        for passage in top:
            terms = passage_terms(passage)
            score = weighted_coverage(question_terms, terms, idf)
            if score > best:
                best, best_terms = score, terms & question_terms
        return best, best_terms

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
