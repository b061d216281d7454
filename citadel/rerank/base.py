"""The Reranker interface (DESIGN.md §6): reorder fused candidates by a model's relevance score."""

from __future__ import annotations

import dataclasses
from typing import Protocol, Sequence, runtime_checkable

from citadel.errors import CitadelError
from citadel.types import Passage


class RerankError(CitadelError):
    """The reranker could not score (missing model directory, failed forward pass)."""

    code = "rerank_failed"


@runtime_checkable
class Reranker(Protocol):
    model_id: str

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]:
        """The `top_n` most relevant passages, best first, each carrying its rerank score."""


def rerank_text(passage: Passage) -> str:
    """What a reranker reads: the heading path (the context the chunk was embedded with) and text."""
    return f"{passage.heading}\n{passage.text}" if passage.heading else passage.text


def ranked_by_scores(passages: Sequence[Passage], scores: Sequence[float], top_n: int) -> list[Passage]:
    """Passages sorted by descending score (ties keep the fused order), with the new scores."""
    order = sorted(range(len(passages)), key=lambda i: (-float(scores[i]), i))
    return [dataclasses.replace(passages[i], score=float(scores[i])) for i in order[:top_n]]


def batches(items: Sequence, size: int):
    for start in range(0, len(items), max(1, size)):
        yield items[start:start + size]
