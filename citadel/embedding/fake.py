"""A deterministic fake embedder for unit tests: hashed word and bigram features, L2-normalised.

Texts that share words get similar vectors, so retrieval tests still mean something, and the same
text always gives the same vector on every machine (no model, no randomness). It counts tokens with
the chunker's word-and-punctuation estimate and has the packaged MiniLM's window, so tests chunk
the way production does.
"""

from __future__ import annotations

import hashlib

import numpy as np

from citadel import regex
from citadel.chunking import count_tokens as approximate_tokens

# MiniLM's 256-token window less [CLS] and [SEP] (citadel/embedding/minilm.py).
HASH_MAX_TOKENS = 254
_WORD = regex.compile("embedding.fake.word", r"[a-z0-9]+")


def _bucket(token: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dim, 1.0 if (value >> 63) & 1 else -1.0


class HashEmbedder:
    model_id = "citadel/hash-embedder-v1"

    def __init__(self, dim: int = 384, max_tokens: int = HASH_MAX_TOKENS):
        self.dim = dim
        self.max_tokens = max_tokens

    def count_tokens(self, text: str) -> int:
        """Deterministic, model-free: words and punctuation marks."""
        return approximate_tokens(text)

    def _embed_one(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dim, dtype=np.float32)
        words = _WORD.findall(text.lower())
        features = words + [f"{a}_{b}" for a, b in zip(words, words[1:])]
        for feature in features:
            index, sign = _bucket(feature, self.dim)
            vector[index] += sign
        norm = float(np.linalg.norm(vector))
        if norm == 0.0:
            vector[0] = 1.0  # an empty text still gets a valid unit vector
            return vector
        return vector / norm

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._embed_one(t) for t in texts])

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed_passages(texts)
