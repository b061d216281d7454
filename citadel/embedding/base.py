"""The Embedder interface (DESIGN.md §6): one model id and dimension, recorded in manifests, and
the model's own token counting, so chunks are sized to what the model actually reads."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class TokenCounter(Protocol):
    """How an embedding model measures text: a text it embeds holds at most `max_tokens` tokens as
    `count_tokens` counts them (the model's window less its special tokens); beyond that the model
    silently truncates, so whatever a chunk says past it is invisible to vector search."""

    max_tokens: int

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` without the model's special tokens ([CLS], [SEP])."""


@runtime_checkable
class TextEmbedder(Protocol):
    """What the query path asks of an embedder: vectors in one model's space. The model itself, a
    guard around it, or a proxy to the embedder deployment (which has no tokenizer to count with)."""

    model_id: str
    dim: int

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        """(n, dim) float32, L2-normalised."""

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """(n, dim) float32, L2-normalised, embedded the way the model expects queries."""


@runtime_checkable
class Embedder(TokenCounter, TextEmbedder, Protocol):
    """An embedding model: it embeds and counts tokens as it reads them (chunking sizes by this)."""
