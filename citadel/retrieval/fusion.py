"""Reciprocal-rank fusion and the per-document cap."""

from __future__ import annotations

from typing import Callable, Iterable, Sequence


def reciprocal_rank_fusion(
    rankings: Iterable[Sequence[int]], k: int, weights: Sequence[float] | None = None
) -> list[tuple[int, float]]:
    """Fuse ranked id lists: score(id) = Σ w / (k + rank), rank from 1. Ties keep first-seen order."""
    scores: dict[int, float] = {}
    rankings = list(rankings)
    weights = weights or [1.0] * len(rankings)
    for ranking, weight in zip(rankings, weights):
        for rank, item in enumerate(ranking, start=1):
            if item < 0:
                continue
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])


def cap_per_document(
    ranked: Sequence[tuple[int, float]], document_of: Callable[[int], str], cap: int
) -> list[tuple[int, float]]:
    """Keep at most `cap` chunks of any one document, preserving order."""
    seen: dict[str, int] = {}
    kept = []
    for item, score in ranked:
        document = document_of(item)
        if seen.get(document, 0) >= cap:
            continue
        seen[document] = seen.get(document, 0) + 1
        kept.append((item, score))
    return kept
