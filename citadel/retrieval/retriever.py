"""ACL-scoped hybrid retrieval (DESIGN.md §4 steps 4-5).

The readable set comes from the catalog for the verified principal, before any similarity: both
legs search only inside it. Small readable sets are searched exactly over just their vectors; large
ones go to the ANN index with the filter inside the graph and efSearch raised for selectivity.
Every passage is re-checked live against the catalog just before it is returned.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

import numpy as np

from citadel.catalog.base import PermissionSource
from citadel.config import RetrievalConfig, IndexConfig
from citadel.embedding.base import Embedder
from citadel.index.hnsw import ef_for_selectivity
from citadel.segments.partition import Partition
from citadel.retrieval.fusion import cap_with_focus, reciprocal_rank_fusion
from citadel.retrieval.partitions import PartitionCache
from citadel.tracing import emit_span
from citadel.types import Degradation, Governance, Passage, Principal

log = logging.getLogger(__name__)


class SearchPlan(StrEnum):
    """How the vector leg searches the readable set (DESIGN.md §4 step 4)."""

    EXACT = "exact"  # a small readable set: exact scan over just its vectors
    ANN = "ann"  # a large one: the ANN index with the filter inside the graph


@dataclass
class RetrievalResult:
    request_id: str
    plan: SearchPlan
    passages: list[Passage]
    degraded: list[str] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    readable_chunks: int = 0

    def to_dict(self) -> dict:
        return {
            "request_id": self.request_id,
            "plan": self.plan,
            "degraded": list(self.degraded),
            "passages": [p.to_dict() for p in self.passages],
        }


@dataclass(frozen=True)
class Candidates:
    """Row ids from each leg, best first, all inside the readable set."""

    vector: list[int]
    keyword: list[int]


@runtime_checkable
class PassageRetriever(Protocol):
    """What the services call to retrieve: the in-process Retriever, or a proxy to a deployment of it."""

    def retrieve(self, principal: Principal, query: str, top_k: int | None = None,
                 request_id: str | None = None) -> RetrievalResult: ...


class Retriever:
    def __init__(self, catalog: PermissionSource, partitions: PartitionCache, embedder: Embedder | None,
                 config: RetrievalConfig, index_config: IndexConfig):
        self._catalog = catalog
        self._partitions = partitions
        self._embedder = embedder
        self._config = config
        self._index_config = index_config

    def retrieve(self, principal: Principal, query: str, top_k: int | None = None,
                 request_id: str | None = None) -> RetrievalResult:
        request_id = request_id or uuid.uuid4().hex
        top_k = min(top_k or self._config.top_k, self._config.max_top_k)
        timings: dict[str, float] = {}
        started = time.perf_counter()
        partition, allowed = self.scope(principal)
        timings["scope_ms"] = _ms_since(started)
        if partition is None or not len(allowed):
            return RetrievalResult(request_id, SearchPlan.EXACT, [], timings_ms=timings)
        plan = self.plan(len(allowed), len(partition))
        degraded: list[str] = []
        candidates = self.legs(partition, query, allowed, plan, degraded, timings)
        fused = self.fuse(candidates)
        capped = cap_with_focus(fused, partition.document_of, self._config.max_chunks_per_document,
                                self._config.focus_window, self._config.focus_share)
        started = time.perf_counter()
        passages = self._live_checked(principal, partition, capped, top_k, leg_ranks(candidates))
        timings["recheck_ms"] = _ms_since(started)
        # The proof a drill counts: every passage that leaves passed this live check.
        emit_span(request_id, "live_check", timings["recheck_ms"], [p.chunk_id for p in passages])
        return RetrievalResult(request_id, plan, passages, degraded, timings, len(allowed))

    def fuse(self, candidates: Candidates) -> list[tuple[int, float]]:
        """Reciprocal-rank fusion of the two legs with the configured k and vector-leg weight."""
        return reciprocal_rank_fusion([candidates.vector, candidates.keyword], self._config.rrf_k,
                                      weights=(self._config.rrf_vector_weight, 1.0))

    def plan(self, readable_rows: int, partition_rows: int) -> SearchPlan:
        """exact when the readable set is small in absolute terms or as a share, else ann."""
        small = readable_rows <= self._config.exact_max_readable
        small_share = partition_rows > 0 and readable_rows / partition_rows <= self._config.exact_max_fraction
        return SearchPlan.EXACT if small or small_share else SearchPlan.ANN

    def scope(self, principal: Principal) -> tuple[Partition | None, np.ndarray]:
        """The principal's partition and the row ids it may read (empty when none)."""
        readable = self._catalog.readable_documents(principal)
        partition = self._partitions.get(principal.tenant_id)
        if partition is None or not readable:
            return partition, np.zeros(0, dtype=np.int64)
        return partition, partition.rows_for({d: r.version for d, r in readable.items()})

    def legs(self, partition: Partition, query: str, allowed: np.ndarray, plan: SearchPlan,
             degraded: list[str], timings: dict[str, float], k: int | None = None,
             use_vector: bool = True, use_keyword: bool = True) -> Candidates:
        """Both legs' candidates, each searched only inside `allowed`."""
        k = k or self._config.candidates
        vector_rows: list[int] = []
        keyword_rows: list[int] = []
        if not use_vector:
            pass
        elif self._embedder is None:
            degraded.append(Degradation.VECTOR_LEG_UNAVAILABLE)
        else:
            started = time.perf_counter()
            try:
                query_vector = self._embedder.embed_queries([query])
                query_model = (self._embedder.model_id, self._embedder.dim)
            except Exception as error:  # embedder down, slow (breaker open) or failing: keyword only, visibly
                log.warning("embedder unavailable, keyword-only retrieval: %s", error)
                degraded.append(Degradation.KEYWORD_ONLY)
                query_vector = None
            timings["embed_ms"] = _ms_since(started)
            if query_vector is not None:
                partition.check_model(*query_model)  # never compare vectors of two models: a clear error
                started = time.perf_counter()
                vector_rows = self._vector_search(partition, query_vector, allowed, plan, k)
                timings["vector_ms"] = _ms_since(started)
        if use_keyword:
            started = time.perf_counter()
            _, keyword_ids = partition.bm25.search(query, k, allowed=allowed)
            timings["bm25_ms"] = _ms_since(started)
            keyword_rows = [int(i) for i in keyword_ids if i >= 0]
        return Candidates(vector_rows, keyword_rows)

    def _vector_search(self, partition: Partition, query_vector: np.ndarray, allowed: np.ndarray,
                       plan: SearchPlan, k: int) -> list[int]:
        if plan == SearchPlan.EXACT or partition.ann is None:
            _, ids = partition.exact.search(query_vector, k, allowed=allowed)
        else:
            fraction = len(allowed) / max(len(partition), 1)
            ef = ef_for_selectivity(k, fraction, self._index_config.hnsw_ef_search,
                                    self._index_config.hnsw_max_ef_search)
            whole = len(allowed) == len(partition)
            _, ids = partition.ann.search(query_vector, k, allowed=None if whole else allowed, ef_search=ef)
        return [int(i) for i in ids[0] if i >= 0]

    def _live_checked(self, principal: Principal, partition: Partition, ranked: list[tuple[int, float]],
                      top_k: int, ranks: tuple[dict[int, int], dict[int, int]] = ({}, {})) -> list[Passage]:
        """Re-read permissions now: a passage whose document changed since the scope was computed
        (revoked, withdrawn, superseded) is dropped, never returned."""
        live = self._catalog.readable_documents(principal)
        passages = []
        for row_id, score in ranked:
            row = partition.row(row_id)
            current = live.get(row["document_id"])
            if current is None or current.version != row["version"]:
                continue
            passages.append(passage_from_row(row, score, ranks[0].get(row_id), ranks[1].get(row_id)))
            if len(passages) == top_k:
                break
        return passages


def leg_ranks(candidates: Candidates) -> tuple[dict[int, int], dict[int, int]]:
    """Row id → rank (from 1) in the vector leg and in the keyword leg."""
    return ({row: rank for rank, row in enumerate(candidates.vector, start=1)},
            {row: rank for rank, row in enumerate(candidates.keyword, start=1)})


def passage_from_row(row: dict, score: float, vector_rank: int | None = None,
                     keyword_rank: int | None = None) -> Passage:
    return Passage(
        chunk_id=row["chunk_id"],
        text=row["text"],
        document_id=row["document_id"],
        title=row["title"],
        version=row["version"],
        heading=row["heading"],
        page=row["page"],
        source=row["source"],
        score=score,
        section_index=row["section_index"],
        vector_rank=vector_rank,
        keyword_rank=keyword_rank,
        governance=Governance.from_mapping(row),
    )


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 3)
