"""Vector search over a partition's stacked segments (an immutable base, then a small delta) as one index.

Each layer owns a contiguous range of the partition's row ids: the base holds rows [0, n_base), the
delta holds [n_base, n_base + n_delta) and numbers its own rows from 0. A layered search splits
`allowed` by range, asks each layer for its own top k with local ids (so the filter stays inside
every layer's search), shifts the ids back, and keeps the best k overall.

Scores are cosines in every layer, so merging by score is exact. (BM25 is not layered: scores from two
indexes with different term statistics do not compare, so a delta's BM25 index extends its base's.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from citadel.index.base import VectorSearch
from citadel.index.exact import PAD_ID, PAD_SCORE, as_allowed


@dataclass(frozen=True)
class Layer:
    index: VectorSearch
    offset: int  # first partition row id this layer holds
    rows: int

    def local_allowed(self, allowed: np.ndarray | None) -> np.ndarray | None:
        """The part of `allowed` in this layer's range, as this layer's own row ids."""
        if allowed is None:
            return None
        start, stop = np.searchsorted(allowed, [self.offset, self.offset + self.rows])
        return allowed[start:stop] - self.offset

    def to_partition_ids(self, ids: np.ndarray) -> np.ndarray:
        return np.where(ids >= 0, ids + self.offset, PAD_ID)


class LayeredVectorIndex:
    """Vector search over layers; each layer may be a different backend (ANN base, exact delta).
    A VectorSearch: the layers are built and saved on their own, never through this view."""

    kind = "layered"

    def __init__(self, layers: list[Layer], dim: int):
        self.layers = layers
        self._dim = dim

    @property
    def dim(self) -> int:
        return self._dim

    def __len__(self) -> int:
        return sum(layer.rows for layer in self.layers)

    def search(self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None,
               ef_search: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        allowed = as_allowed(allowed)
        shape = (1 if np.ndim(queries) == 1 else len(queries), k)
        # Start from padding, so every row has k candidates even when no layer has any.
        scores = [np.full(shape, PAD_SCORE, dtype=np.float32)]
        ids = [np.full(shape, PAD_ID, dtype=np.int64)]
        for layer in self.layers:
            local = layer.local_allowed(allowed)
            if layer.rows == 0 or (local is not None and local.size == 0):
                continue
            layer_scores, layer_ids = layer.index.search(queries, k, allowed=local, ef_search=ef_search)
            scores.append(layer_scores)
            ids.append(layer.to_partition_ids(layer_ids))
        # Keep the k best of each row across the layers' candidates.
        all_scores, all_ids = np.concatenate(scores, axis=1), np.concatenate(ids, axis=1)
        order = np.argsort(-all_scores, axis=1, kind="stable")[:, :k]
        return (np.take_along_axis(all_scores, order, axis=1).astype(np.float32),
                np.take_along_axis(all_ids, order, axis=1))
