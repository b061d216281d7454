"""Pick a vector backend by name, and reopen a saved one from its `index.json`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from citadel.index.base import VectorIndex
from citadel.index.diskann import DiskANNIndex
from citadel.index.exact import ExactIndex, read_index_meta
from citadel.index.hnsw import HNSWIndex

VECTOR_BACKENDS: dict[str, type] = {
    ExactIndex.kind: ExactIndex,
    HNSWIndex.kind: HNSWIndex,
    DiskANNIndex.kind: DiskANNIndex,
}


def _backend(kind: str) -> type:
    try:
        return VECTOR_BACKENDS[kind]
    except KeyError:
        raise ValueError(f"unknown vector index kind {kind!r}; known: {sorted(VECTOR_BACKENDS)}") from None


def make_vector_index(kind: str, dim: int, **params: Any) -> VectorIndex:
    """A new, empty index of `kind` (call `add` once to build it)."""
    return _backend(kind)(dim, **params)


def load_vector_index(directory: Path) -> VectorIndex:
    """Reopen whichever backend `save` wrote into `directory`."""
    kind = read_index_meta(Path(directory))["kind"]
    return _backend(kind).load(Path(directory))
