"""The narrow interfaces every index backend implements.

Vectors are float32, L2-normalised, scored by inner product (cosine). Ids are int64 row numbers
into the partition's chunk table. `allowed` is a sorted int64 array of the row ids the caller may
see; a backend must never return an id outside it (filter inside the search, not after it).
Results are padded with id -1 / score -inf when fewer than k rows qualify.

Three Protocols, split by who calls them:
- `VectorSearch`: what retrieval calls (dim, size, filtered search). The layered view of a
  partition's segments (layered.py) is one without being buildable or saveable itself.
- `VectorIndex`: a `VectorSearch` that is also built once (`add`), saved and loaded: exact, hnsw,
  diskann. Segment builds use these.
- `KeywordIndex`: BM25 over chunk texts (bm25.py): built once, saved, loaded; retrieval calls `search`.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class VectorSearch(Protocol):
    kind: ClassVar[str]

    @property
    def dim(self) -> int: ...

    def __len__(self) -> int: ...

    def search(
        self,
        queries: np.ndarray,
        k: int,
        allowed: np.ndarray | None = None,
        ef_search: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return (scores (q, k) float32, ids (q, k) int64), best first; one query vector (dim,)
        is a batch of one. `ef_search` widens an ANN search (ignored by exact search)."""


@runtime_checkable
class VectorIndex(VectorSearch, Protocol):
    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """Index `vectors` (n, dim) float32 under `ids` (n,) int64. Called once per build."""

    def save(self, directory: Path) -> None: ...

    @classmethod
    def load(cls, directory: Path) -> "VectorIndex": ...


@runtime_checkable
class KeywordIndex(Protocol):
    """BM25 over chunk texts, with the same `allowed` contract as VectorIndex."""

    kind: ClassVar[str]

    def __len__(self) -> int: ...

    def add(self, texts: list[str], ids: np.ndarray) -> None:
        """Index `texts` under `ids` (n,) int64. Called once per build."""

    def search(
        self, query: str, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return (scores (k,) float32, ids (k,) int64) for one query, best first, -1 / -inf padded.
        Any text is a query: user text never reaches a query grammar as syntax, so search never
        raises on what a user typed."""

    def save(self, directory: Path) -> None: ...

    @classmethod
    def load(cls, directory: Path) -> "KeywordIndex": ...


def pad_results(scores: list[float], ids: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Pad one query's results to length k with -inf / -1."""
    out_s = np.full(k, -np.inf, dtype=np.float32)
    out_i = np.full(k, -1, dtype=np.int64)
    n = min(k, len(ids))
    out_s[:n] = scores[:n]
    out_i[:n] = ids[:n]
    return out_s, out_i
