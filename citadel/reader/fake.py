"""The deterministic fake reader: no model, so unit tests can predict its scores exactly.

Its probability is 0.05 + 0.9 * (share of the question's distinct content terms found in the text),
squashed into (0, 1) so it never claims certainty: a test that needs "the answering text scores
higher" gets it from word overlap, and one that needs a number can compute it with `expected`.
"""

from __future__ import annotations

from typing import Sequence

from citadel.reader.base import bounded
from citadel.text import content_terms

FLOOR = 0.05
SPAN = 0.9


def expected(question: str, text: str) -> float:
    """The fake's probability for one already-bounded pair: a question without content terms
    (empty, or in a script the tokenizer does not split) scores FLOOR for every text."""
    asked = set(content_terms(question))
    if not asked:
        return FLOOR
    share = len(asked & set(content_terms(text))) / len(asked)
    return FLOOR + SPAN * share


class FakeReader:
    """Word-overlap reader for tests: deterministic and instant."""

    model_id = "fake-reader"

    def score(self, question: str, texts: Sequence[str]) -> list[float]:
        question, texts = bounded(question, texts)  # the size bounds hold for every backend
        return [expected(question, text) for text in texts]
