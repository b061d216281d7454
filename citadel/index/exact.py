"""Exact (brute-force) inner-product search with numpy, plus the small helpers every backend shares.

`ExactIndex` is the backend for tiny partitions and mutable delta segments, and the planner's choice
when the readable set is small: with `allowed` it gathers just those rows and scores only them, so
its filtered results are exact by construction.

The helpers (`RowIdMap`, `exact_top_k`, the `index.json` read/write) live here because they are
pure numpy and the ANN backends need them too (the id translation, and the exact re-score that the
DiskANN adapter falls back to for small allowed sets).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

INDEX_META_FILE = "index.json"
VECTORS_FILE = "vectors.npy"
IDS_FILE = "ids.npy"

# Bound the (queries x rows) score block so a large query batch against a large matrix never
# materialises more than this many float32 scores at once (64 Mi floats = 256 MiB).
MAX_SCORE_BLOCK_ELEMENTS = 1 << 26

PAD_ID = -1
PAD_SCORE = -np.inf


# ---------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------


def as_query_matrix(queries: np.ndarray, dim: int) -> np.ndarray:
    """Return queries as a C-contiguous float32 (q, dim) matrix; a single 1-d query becomes (1, dim)."""
    matrix = np.ascontiguousarray(queries, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    if matrix.ndim != 2 or matrix.shape[1] != dim:
        raise ValueError(f"queries must have shape (q, {dim}), got {np.shape(queries)}")
    return matrix


def as_allowed(allowed: np.ndarray | None) -> np.ndarray | None:
    """Normalise `allowed` to a sorted, unique int64 array (cheap when it already is one)."""
    if allowed is None:
        return None
    arr = np.asarray(allowed, dtype=np.int64).ravel()
    if arr.size > 1 and not np.all(arr[1:] > arr[:-1]):
        arr = np.unique(arr)
    return arr


def padded_empty(num_queries: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """All-padding results: what a search returns when nothing may be seen."""
    return (
        np.full((num_queries, k), PAD_SCORE, dtype=np.float32),
        np.full((num_queries, k), PAD_ID, dtype=np.int64),
    )


def validate_vectors_and_ids(vectors: np.ndarray, ids: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Check shapes and id uniqueness; return (float32 C-contiguous vectors, int64 ids)."""
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    row_ids = np.asarray(ids, dtype=np.int64).ravel()
    if matrix.ndim != 2 or matrix.shape[1] != dim:
        raise ValueError(f"vectors must have shape (n, {dim}), got {matrix.shape}")
    if matrix.shape[0] != row_ids.shape[0]:
        raise ValueError(f"{matrix.shape[0]} vectors but {row_ids.shape[0]} ids")
    if row_ids.size and row_ids.min() < 0:
        raise ValueError("ids must be non-negative (-1 is the padding id)")
    if np.unique(row_ids).size != row_ids.size:
        raise ValueError("ids must be unique")
    return matrix, row_ids


class RowIdMap:
    """Translate between a backend's internal positions 0..n-1 and the caller's external row ids.

    The common case is ids == arange(n) (a partition's rows added in order); it is detected once so
    the hot path does no translation at all.
    """

    def __init__(self, external_ids: np.ndarray):
        self.external_ids = np.asarray(external_ids, dtype=np.int64)
        n = self.external_ids.size
        self.is_identity = bool(np.array_equal(self.external_ids, np.arange(n, dtype=np.int64)))
        if not self.is_identity:
            self._order = np.argsort(self.external_ids, kind="stable")
            self._sorted_ids = self.external_ids[self._order]

    def __len__(self) -> int:
        return self.external_ids.size

    def to_external(self, positions: np.ndarray) -> np.ndarray:
        """Map internal positions to external ids, keeping the -1 padding."""
        positions = np.asarray(positions, dtype=np.int64)
        if self.is_identity:
            return positions
        valid = positions >= 0
        return np.where(valid, self.external_ids[np.where(valid, positions, 0)], PAD_ID)

    def to_internal(self, sorted_external: np.ndarray) -> np.ndarray:
        """Map sorted external ids to sorted internal positions, dropping ids this index does not hold.

        Sorted output lets callers gather rows in storage order and binary-search membership.
        """
        n = len(self)
        if self.is_identity:
            # Already sorted: no copy, no sort (re-sorting 10k ids cost 0.3 ms per query).
            lo, hi = np.searchsorted(sorted_external, [0, n])
            return sorted_external[lo:hi]
        slots = np.searchsorted(self._sorted_ids, sorted_external)
        present = contains_sorted(self._sorted_ids, sorted_external)
        return np.sort(self._order[slots[present]])


def contains_sorted(sorted_values: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Boolean mask: which `candidates` occur in `sorted_values` (binary search, no n-sized mask)."""
    if sorted_values.size == 0:
        return np.zeros(candidates.shape, dtype=bool)
    slots = np.searchsorted(sorted_values, candidates)
    slots = np.minimum(slots, sorted_values.size - 1)
    return sorted_values[slots] == candidates


def exact_top_k(
    queries: np.ndarray, rows: np.ndarray, row_ids: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Score `queries` against `rows` by inner product and keep the k best per query.

    `rows` may be float16 (a memory-mapped re-score copy); scores are computed in float32.
    Returns (scores (q, k) float32, ids (q, k) int64), padded when there are fewer than k rows.
    """
    num_queries, num_rows = queries.shape[0], rows.shape[0]
    out_scores, out_ids = padded_empty(num_queries, k)
    if num_rows == 0 or num_queries == 0:
        return out_scores, out_ids
    keep = min(k, num_rows)
    block = max(1, MAX_SCORE_BLOCK_ELEMENTS // num_rows)
    rows32 = rows if rows.dtype == np.float32 else rows.astype(np.float32)
    for start in range(0, num_queries, block):
        stop = min(start + block, num_queries)
        scores = queries[start:stop] @ rows32.T
        positions = _top_positions(scores, keep)
        out_scores[start:stop, :keep] = np.take_along_axis(scores, positions, axis=1)
        out_ids[start:stop, :keep] = row_ids[positions]
    return out_scores, out_ids


def _top_positions(scores: np.ndarray, keep: int) -> np.ndarray:
    """Column positions of the `keep` highest scores per row, best first (argpartition, then sort)."""
    if keep < scores.shape[1]:
        candidates = np.argpartition(-scores, keep - 1, axis=1)[:, :keep]
    else:
        candidates = np.broadcast_to(np.arange(scores.shape[1]), scores.shape).copy()
    candidate_scores = np.take_along_axis(scores, candidates, axis=1)
    order = np.argsort(-candidate_scores, axis=1, kind="stable")
    return np.take_along_axis(candidates, order, axis=1)


def write_index_meta(directory: Path, kind: str, params: dict[str, Any]) -> None:
    """Write the small `index.json` that `load_vector_index` dispatches on."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / INDEX_META_FILE).write_text(json.dumps({"kind": kind, "params": params}, indent=2))


def read_index_meta(directory: Path) -> dict[str, Any]:
    return json.loads((Path(directory) / INDEX_META_FILE).read_text())


# ---------------------------------------------------------------------------------------------
# ExactIndex
# ---------------------------------------------------------------------------------------------


class ExactIndex:
    """Brute-force inner-product search over an in-memory float32 matrix."""

    kind: ClassVar[str] = "exact"

    def __init__(self, dim: int):
        self._dim = int(dim)
        self._vectors = np.zeros((0, self._dim), dtype=np.float32)
        self._id_map = RowIdMap(np.zeros(0, dtype=np.int64))
        self._built = False

    @property
    def dim(self) -> int:
        return self._dim

    def __len__(self) -> int:
        return self._vectors.shape[0]

    def params(self) -> dict[str, Any]:
        return {"dim": self._dim}

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        if self._built:
            raise RuntimeError("ExactIndex.add is called once per build")
        self._vectors, row_ids = validate_vectors_and_ids(vectors, ids, self._dim)
        self._id_map = RowIdMap(row_ids)
        self._built = True

    def search(
        self,
        queries: np.ndarray,
        k: int,
        allowed: np.ndarray | None = None,
        ef_search: int | None = None,  # accepted for interface compatibility; exact search ignores it
    ) -> tuple[np.ndarray, np.ndarray]:
        query_matrix = as_query_matrix(queries, self._dim)
        allowed = as_allowed(allowed)
        if allowed is None:
            return exact_top_k(query_matrix, self._vectors, self._id_map.external_ids, k)
        positions = self._id_map.to_internal(allowed)
        # Gather first so the cost is proportional to the readable set, not the partition.
        return exact_top_k(
            query_matrix, self._vectors[positions], self._id_map.external_ids[positions], k
        )

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / VECTORS_FILE, self._vectors)
        np.save(directory / IDS_FILE, self._id_map.external_ids)
        write_index_meta(directory, self.kind, self.params())

    @classmethod
    def load(cls, directory: Path) -> "ExactIndex":
        directory = Path(directory)
        meta = read_index_meta(directory)
        index = cls(**meta["params"])
        index.add(np.load(directory / VECTORS_FILE), np.load(directory / IDS_FILE))
        return index
