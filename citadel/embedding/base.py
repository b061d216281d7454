"""The Embedder interface (DESIGN.md §6): one model id and dimension, recorded in manifests."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    model_id: str
    dim: int

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        """(n, dim) float32, L2-normalised."""

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """(n, dim) float32, L2-normalised, embedded the way the model expects queries."""
