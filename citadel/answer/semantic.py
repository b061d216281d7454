"""Semantic support through the embedder: a question's words matched to evidence by meaning.

A paraphrased question ("how much vacation do I get?") shares few words with the passage that
answers it ("Annual leave ... 4 hours per pay period"), so lexical coverage alone calls it
unsupported. Here each distinctive question word is embedded on its own and compared with the
passages' stored vectors (no passage is embedded again): "vacation" sits closer to a passage on annual
leave than to one on laptops. The gate, the extractive generator and the validator read the same
matches, so what counts as support is decided once.

Word vectors are remembered (the service's `QueryVectorMemo`, a second one sized for words), so a
tenant's recurring vocabulary costs nothing after its first use.
"""

from __future__ import annotations

import functools
from typing import Callable, Protocol, Sequence

import numpy as np

from citadel.text import STOPWORDS, stem, words_of

# A word's cosine to a passage is mapped linearly from [LOW, HIGH] onto [0, 1]: at or below LOW it
# says nothing (unrelated words score ~0-0.1 on MiniLM), at HIGH it counts like the word itself.
MATCH_LOW = 0.1
MATCH_HIGH = 0.4
WORD_MEMO_CAPACITY = 50_000  # words (and validator claims) whose vectors are remembered
# At most this many words of one question are embedded: a question is bounded, this bounds the cost.
MAX_QUESTION_WORDS = 24


def question_words(question: str) -> dict[str, str]:
    """Distinctive words of the question by their term (the stem the gate counts): {"vacat": "vacation"}."""
    found: dict[str, str] = {}
    for word in words_of(question):
        if word in STOPWORDS or word.isdigit() or len(found) >= MAX_QUESTION_WORDS:
            continue
        found.setdefault(stem(word), word)
    return found


class TextVectors(Protocol):
    """Texts → unit vectors through the embedder (as queries), remembered: `QueryVectorMemo`."""

    def vectors(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        ...


def match_strength(cosine: float) -> float:
    return float(min(max((cosine - MATCH_LOW) / (MATCH_HIGH - MATCH_LOW), 0.0), 1.0))


def term_matches(question: str, passage_vectors: np.ndarray, words: TextVectors) -> list[dict[str, float]]:
    """Per passage (rows of `passage_vectors`, unit length), each question term's match strength."""
    by_term = question_words(question)
    if not by_term or not len(passage_vectors):
        return [{} for _ in range(len(passage_vectors))]
    vectors = words.vectors(list(by_term.values()))
    terms = list(by_term)
    matrix = np.stack([vectors[by_term[t]] for t in terms]) @ np.asarray(passage_vectors, dtype=np.float32).T
    return [{t: match_strength(matrix[i, j]) for i, t in enumerate(terms)} for j in range(matrix.shape[1])]


# A claim whose embedding is at least this close to a source passage's stored vector is supported
# by it in meaning, though it shares too few words (a generator's paraphrase). Conservative: claims
# about the same topic but another fact sit lower on MiniLM; figures and links are checked anyway.
CLAIM_SUPPORT_COSINE = 0.6


class ClaimSupport:
    """Which numbered sources support a claim by meaning: the claim embedded (remembered like a
    word), compared with each source passage's stored vector.

    `source_vectors` loads {source number: vector} on the first claim that needs it: most answers
    (every extractive one) are supported word for word and never read a vector."""

    def __init__(self, texts: TextVectors, source_vectors: Callable[[], dict[int, np.ndarray]],
                 threshold: float = CLAIM_SUPPORT_COSINE):
        self._texts = texts
        self._load = source_vectors
        self.threshold = threshold

    @functools.cached_property
    def _sources(self) -> tuple[list[int], np.ndarray | None]:
        vectors = self._load()
        numbers = list(vectors)
        return numbers, np.stack([vectors[n] for n in numbers]) if numbers else None

    def supporting(self, claim: str) -> list[int]:
        """Source numbers whose passage the claim matches, closest first (empty when none does)."""
        if not claim.strip():
            return []
        numbers, matrix = self._sources
        if matrix is None:
            return []
        cosines = matrix @ self._texts.vectors([claim])[claim]
        return [numbers[i] for i in np.argsort(-cosines) if cosines[i] >= self.threshold]
