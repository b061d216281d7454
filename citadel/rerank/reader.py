"""`answer.reranker: reader`: the reader rescoring fused, live-checked candidates.

Each candidate is read as its heading path and text (the model truncates to its token limit). The
final score blends the reader's probability with the candidate's fused score (relative to the best
fused score), because the reader was trained on questions and the sentences that answer them while
fusion also knows which passages both legs agree on; `fusion_weight` is chosen on dev splits
(SciFact train queries, the paraphrase dev split), never on a test split.
"""

from __future__ import annotations

from typing import Sequence

from citadel.reader.base import Reader
from citadel.rerank.base import ranked_by_scores, rerank_text
from citadel.types import Passage

DEFAULT_FUSION_WEIGHT = 0.9
DEFAULT_CANDIDATES = 30


def blended(probabilities: Sequence[float], fused: Sequence[float], fusion_weight: float) -> list[float]:
    """(1 - w) * reader probability + w * fused score / best fused score."""
    best = max((float(f) for f in fused), default=0.0)
    return [(1.0 - fusion_weight) * float(p) + fusion_weight * (float(f) / best if best > 0 else 0.0)
            for p, f in zip(probabilities, fused)]


class ReaderReranker:
    enabled = True

    def __init__(self, reader: Reader, fusion_weight: float = DEFAULT_FUSION_WEIGHT,
                 candidates: int = DEFAULT_CANDIDATES):
        self.reader = reader
        self.fusion_weight = fusion_weight
        self.candidates = candidates
        self.model_id = f"reader:{reader.model_id}"

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]:
        """The reader reads the first `candidates` (fused order); the rest keep their fused order
        after them, scored below every read one."""
        if not passages or top_n <= 0:
            return []
        read, rest = passages[:self.candidates], passages[self.candidates:]
        probabilities = self.reader.score(query, [rerank_text(p) for p in read])
        scores = blended(probabilities, [p.score for p in read], self.fusion_weight)
        floor = min(scores, default=0.0)
        scores += [floor - 1.0 - i for i in range(len(rest))]
        return ranked_by_scores([*read, *rest], scores, top_n)
