"""The Reranker interface (DESIGN.md §6): reorder fused candidates by a model's relevance score.

`enabled` says whether a reranker scores at all. `answer.reranker: none` builds NoRerank, whose
`enabled` is False: the answer service then skips the stage and reports it (`rerank_skipped`), and
the confidence gate never reads a fusion score as a rerank score. Wrappers (a breaker guard, a proxy
to the reranker deployment) report the `enabled` of what they wrap.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, Sequence, runtime_checkable

from citadel.errors import RerankError
from citadel.types import Passage


@runtime_checkable
class Reranker(Protocol):
    model_id: str
    enabled: bool  # False: the stage is off; callers skip `rerank` and report it as skipped

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]:
        """The `min(top_n, len(passages))` most relevant of `passages`, best first (scores never
        increase down the list), each a copy carrying its rerank score; `passages` is left as it
        was. Raises RerankError when the model cannot score (missing model, failed forward pass)."""


def rerank_text(passage: Passage) -> str:
    """What a reranker reads: the heading path (the context the chunk was embedded with) and text."""
    return f"{passage.heading}\n{passage.text}" if passage.heading else passage.text


def ranked_by_scores(passages: Sequence[Passage], scores: Sequence[float], top_n: int) -> list[Passage]:
    """Passages sorted by descending score (ties keep the fused order), with the new scores."""
    order = sorted(range(len(passages)), key=lambda i: (-float(scores[i]), i))
    return [dataclasses.replace(passages[i], score=float(scores[i])) for i in order[:max(top_n, 0)]]


def batches(items: Sequence, size: int):
    for start in range(0, len(items), max(1, size)):
        yield items[start:start + size]
