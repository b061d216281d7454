"""HNSW over faiss: the in-RAM base segment of hot partitions.

- Graph: `IndexHNSWFlat` (fp32 storage) or `IndexHNSWSQ(QT_fp16)` (fp16 storage, ~42% less RAM with no
  measured recall loss), both with METRIC_INNER_PRODUCT.
- Ids: the graph holds internal positions 0..n-1 and a `RowIdMap` translates to the caller's row ids.
  This is the "equivalent" of `IndexIDMap2`: same external ids, but the filter selector is a bitmap
  over internal positions (no per-candidate id translation inside the graph walk) and the common
  ids == arange(n) case costs nothing.
- Filtering: `SearchParametersHNSW(sel=IDSelectorBitmap, efSearch=ef)` so the filter is applied
  inside the graph walk; callers raise efSearch for selective filters with `ef_for_selectivity`.
  A filtered walk can strand itself when very few nodes are admissible (3 readable rows out of 20k
  returned nothing at efSearch 64), so allowed sets of at most `exact_max_allowed` rows are scored
  exactly from the stored vectors, and any query whose walk comes back short (fewer than
  min(k, |allowed|) hits) is redone exactly: a result is never short while readable rows exist.
- Threads: faiss's OpenMP pool is process-wide; the constructor (and `load`) sets it explicitly.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import faiss
import numpy as np

from citadel.index.exact import (
    IDS_FILE,
    PAD_ID,
    PAD_SCORE,
    RowIdMap,
    as_allowed,
    as_query_matrix,
    exact_top_k,
    padded_empty,
    read_index_meta,
    validate_vectors_and_ids,
    write_index_meta,
)

GRAPH_FILE = "hnsw.faiss"
STORAGE_TYPES = ("fp32", "fp16")

DEFAULT_M = 32
DEFAULT_EF_CONSTRUCTION = 200
DEFAULT_EF_SEARCH = 64
DEFAULT_MAX_EF = 4096
# With a filter, roughly `fraction` of the nodes the walk scores are admissible, so it must score
# about k / fraction to collect k; the extra margin buys recall (measured: 20k x 384, 1% readable,
# ef = 1000 -> recall 0.967, 2000 -> 0.993).
FILTER_OVERSAMPLE = 1.5
# Below this many readable rows, exact scoring of the gathered rows beats a raised-ef graph walk
# (4096 x 384 inner products is ~1.5M multiply-adds; a walk at efSearch 4096 costs ~8 ms here).
DEFAULT_EXACT_MAX_ALLOWED = 4096


def ef_for_selectivity(
    k: int,
    fraction: float,
    base_ef: int = DEFAULT_EF_SEARCH,
    max_ef: int = DEFAULT_MAX_EF,
    oversample: float = FILTER_OVERSAMPLE,
) -> int:
    """efSearch for an in-graph filtered search where `fraction` of the rows are readable.

    Never below the unfiltered `base_ef` (or k), never above `max_ef` (past it the planner should
    prefer exact search over the gathered readable rows).
    """
    if fraction <= 0 or fraction >= 1:
        return max(base_ef, k)  # nothing readable (the caller pads) or no filter at all
    needed = math.ceil(oversample * k / fraction)
    return int(min(max(needed, base_ef, k), max(max_ef, k)))


class HNSWIndex:
    """faiss HNSW with inner-product scoring, external row ids and in-graph filtering."""

    kind: ClassVar[str] = "hnsw"

    def __init__(
        self,
        dim: int,
        m: int = DEFAULT_M,
        ef_construction: int = DEFAULT_EF_CONSTRUCTION,
        ef_search: int = DEFAULT_EF_SEARCH,
        storage: str = "fp32",
        num_threads: int = 1,
        exact_max_allowed: int = DEFAULT_EXACT_MAX_ALLOWED,
    ):
        if storage not in STORAGE_TYPES:
            raise ValueError(f"storage must be one of {STORAGE_TYPES}, got {storage!r}")
        self._dim = int(dim)
        self.m = int(m)
        self.ef_construction = int(ef_construction)
        self.ef_search = int(ef_search)
        self.storage = storage
        self.num_threads = int(num_threads)
        # Query-time policy, not part of the graph: may be changed on a loaded index.
        self.exact_max_allowed = int(exact_max_allowed)
        faiss.omp_set_num_threads(self.num_threads)
        self._index = self._new_graph()
        self._id_map = RowIdMap(np.zeros(0, dtype=np.int64))
        self._built = False

    # -- construction ------------------------------------------------------------------------

    def _new_graph(self) -> faiss.Index:
        if self.storage == "fp16":
            graph = faiss.IndexHNSWSQ(
                self._dim, faiss.ScalarQuantizer.QT_fp16, self.m, faiss.METRIC_INNER_PRODUCT
            )
        else:
            graph = faiss.IndexHNSWFlat(self._dim, self.m, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = self.ef_construction
        graph.hnsw.efSearch = self.ef_search
        return graph

    @property
    def dim(self) -> int:
        return self._dim

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def params(self) -> dict[str, Any]:
        return {
            "dim": self._dim,
            "m": self.m,
            "ef_construction": self.ef_construction,
            "ef_search": self.ef_search,
            "storage": self.storage,
            "num_threads": self.num_threads,
            "exact_max_allowed": self.exact_max_allowed,
        }

    @property
    def faiss_index(self) -> faiss.Index:
        """The raw faiss graph (internal positions as labels); for benchmarks and diagnostics."""
        return self._index

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        if self._built:
            raise RuntimeError("HNSWIndex.add is called once per build")
        matrix, row_ids = validate_vectors_and_ids(vectors, ids, self._dim)
        if not self._index.is_trained:
            # fp16 scalar quantisation has no learned parameters, but faiss still wants train().
            self._index.train(matrix)
        self._index.add(matrix)
        self._id_map = RowIdMap(row_ids)
        self._built = True

    # -- search ------------------------------------------------------------------------------

    def search(
        self,
        queries: np.ndarray,
        k: int,
        allowed: np.ndarray | None = None,
        ef_search: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        query_matrix = as_query_matrix(queries, self._dim)
        ef = max(self.ef_search if ef_search is None else int(ef_search), k)
        if allowed is None:
            params = faiss.SearchParametersHNSW(efSearch=ef)
            scores, positions = self._index.search(query_matrix, k, params=params)
            return self._finish(scores, positions)
        allowed_positions = self._id_map.to_internal(as_allowed(allowed))
        if allowed_positions.size == 0:
            return padded_empty(query_matrix.shape[0], k)
        if allowed_positions.size <= self.exact_max_allowed:
            return self._exact_search(query_matrix, k, allowed_positions)
        return self._filtered_graph_search(query_matrix, k, allowed_positions, ef)

    def _filtered_graph_search(
        self, queries: np.ndarray, k: int, sorted_positions: np.ndarray, ef: int
    ) -> tuple[np.ndarray, np.ndarray]:
        bitmap = self._bitmap(sorted_positions)
        # `bitmap` must stay referenced until search returns: the selector holds a raw pointer.
        selector = faiss.IDSelectorBitmap(len(self), faiss.swig_ptr(bitmap))
        params = faiss.SearchParametersHNSW(sel=selector, efSearch=ef)
        scores, positions = self._index.search(queries, k, params=params)
        scores, ids = self._finish(scores, positions)
        short = (positions >= 0).sum(axis=1) < min(k, sorted_positions.size)
        if short.any():
            scores[short], ids[short] = self._exact_search(queries[short], k, sorted_positions)
        return scores, ids

    def _exact_search(
        self, queries: np.ndarray, k: int, sorted_positions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Inner products against just the allowed rows, decoded from the graph's own storage."""
        rows = self._index.reconstruct_batch(sorted_positions)
        return exact_top_k(queries, rows, self._id_map.to_external(sorted_positions), k)

    def _bitmap(self, positions: np.ndarray) -> np.ndarray:
        """faiss IDSelectorBitmap layout: bit (i % 8) of byte i // 8, little-endian bit order."""
        mask = np.zeros(len(self), dtype=bool)
        mask[positions] = True
        return np.packbits(mask, bitorder="little")

    def _finish(self, scores: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Translate positions to row ids and normalise faiss's padding (label -1) to -1 / -inf."""
        missing = positions < 0
        if missing.any():
            scores[missing] = PAD_SCORE
            positions[missing] = PAD_ID
        return scores, self._id_map.to_external(positions)

    # -- persistence -------------------------------------------------------------------------

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self._index, str(directory / GRAPH_FILE))
        np.save(directory / IDS_FILE, self._id_map.external_ids)
        write_index_meta(directory, self.kind, self.params())

    @classmethod
    def load(cls, directory: Path, **overrides: Any) -> "HNSWIndex":
        """Open a saved index; `overrides` may change query-time settings (threads, ef, thresholds)."""
        directory = Path(directory)
        index = cls(**{**read_index_meta(directory)["params"], **overrides})
        index._index = faiss.read_index(str(directory / GRAPH_FILE))
        index._index.hnsw.efSearch = index.ef_search
        index._id_map = RowIdMap(np.load(directory / IDS_FILE))
        index._built = True
        return index
