"""Reciprocal-rank fusion and the per-document cap.

The cap keeps one long document from crowding out the others, which is what a question needs when
several documents could answer it. When the fused ranking says the question is about ONE document
(it holds most of the fused score near the top: "Adobe's operating margin in FY2022" over six
filings), the cap is what hides the answer: the statement table is the ninth-best chunk of a 100-page
10-K, and two chunks per document never reach it. That focused document's cap is relaxed; every
other document keeps the cap, so the other documents still get their seats.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence


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
    ranked: Sequence[tuple[int, float]], document_of: Callable[[int], str], cap: int,
    exceptions: Mapping[str, int] | None = None,
) -> list[tuple[int, float]]:
    """Keep at most `cap` chunks of any one document (`exceptions`: other caps for some documents),
    preserving order."""
    exceptions = exceptions or {}
    seen: dict[str, int] = {}
    kept = []
    for item, score in ranked:
        document = document_of(item)
        if seen.get(document, 0) >= exceptions.get(document, cap):
            continue
        seen[document] = seen.get(document, 0) + 1
        kept.append((item, score))
    return kept


def focused_document(ranked: Sequence[tuple[int, float]], document_of: Callable[[int], str],
                     window: int, share: float) -> str | None:
    """The document holding at least `share` of the fused score in the top `window`, else None."""
    mass: dict[str, float] = {}
    for item, score in ranked[:window]:
        document = document_of(item)
        mass[document] = mass.get(document, 0.0) + score
    total = sum(mass.values())
    if total <= 0:
        return None
    document, top = max(mass.items(), key=lambda pair: pair[1])
    return document if top / total >= share else None


def cap_with_focus(ranked: Sequence[tuple[int, float]], document_of: Callable[[int], str], cap: int,
                   window: int, share: float, focus_cap: int | None = None) -> list[tuple[int, float]]:
    """`cap_per_document`, except that the focused document (see `focused_document`) may keep
    `focus_cap` chunks (None: no limit)."""
    focus = focused_document(ranked, document_of, window, share)
    if focus is None:
        return cap_per_document(ranked, document_of, cap)
    limit = len(ranked) if focus_cap is None else max(cap, focus_cap)
    return cap_per_document(ranked, document_of, cap, {focus: limit})
