"""The Embedder suites (citadel/embedding/base.py).

`EmbedderConformance` is what the query path relies on from any TextEmbedder (the model, its guard,
the proxy to the embedder deployment): (n, dim) float32 rows of unit length, in input order, the
same vector for the same text whatever else is in the batch, queries embedded into the same space as
passages, texts sharing words nearer than unrelated ones. `EmbeddingModelConformance` adds what
chunking relies on from the model itself: it counts tokens as it reads them, and text past its
window still embeds. `TokenCounterConformance`: counts that grow with the text and stay within what
the model reads.
"""

from __future__ import annotations

import numpy as np
import pytest

from citadel.embedding.base import Embedder, TextEmbedder, TokenCounter

UNIT_TOLERANCE = 1e-4
# Batching may change float accumulation order on some BLAS paths; anything beyond this is a bug.
BATCH_TOLERANCE = 1e-4
HOTEL = "The hotel limit is 220 USD per night in London."
HOTEL_QUESTION = "What is the hotel limit per night in London?"
LAPTOP = "Laptops must use full-disk encryption and a screen lock."
TEXTS = [HOTEL, LAPTOP, "Receipts are required for every expense above 25 EUR.", "", "ünïcödé — text ✓"]
LONG_TEXT = " ".join(["The travel policy covers flights, hotels, meals and receipts."] * 120)


class EmbedderConformance:
    """Override `backend` (class-scoped) with the TextEmbedder under test."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls) -> TextEmbedder:
        raise NotImplementedError("a conformance subclass provides the embedder under test")

    def test_implements_protocol(self, backend):
        assert isinstance(backend, TextEmbedder)
        assert isinstance(backend.model_id, str) and backend.model_id
        assert isinstance(backend.dim, int) and backend.dim > 0

    @pytest.mark.parametrize("method", ["embed_passages", "embed_queries"])
    def test_rows_are_float32_unit_vectors_in_input_order(self, backend, method):
        vectors = getattr(backend, method)(TEXTS)
        assert vectors.shape == (len(TEXTS), backend.dim) and vectors.dtype == np.float32
        assert np.all(np.isfinite(vectors))
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=UNIT_TOLERANCE)
        singles = np.stack([getattr(backend, method)([text])[0] for text in TEXTS])
        np.testing.assert_allclose(vectors, singles, atol=BATCH_TOLERANCE)  # order kept, batch-independent

    @pytest.mark.parametrize("method", ["embed_passages", "embed_queries"])
    def test_no_texts_give_an_empty_matrix(self, backend, method):
        vectors = getattr(backend, method)([])
        assert vectors.shape == (0, backend.dim) and vectors.dtype == np.float32

    def test_deterministic(self, backend):
        np.testing.assert_array_equal(backend.embed_passages(TEXTS), backend.embed_passages(TEXTS))
        np.testing.assert_array_equal(backend.embed_queries([HOTEL_QUESTION]), backend.embed_queries([HOTEL_QUESTION]))

    def test_a_query_is_nearest_the_passage_that_shares_its_words(self, backend):
        passages = backend.embed_passages([HOTEL, LAPTOP])
        [query] = backend.embed_queries([HOTEL_QUESTION])
        scores = passages @ query
        assert scores[0] > scores[1] + 0.1, scores


class EmbeddingModelConformance(EmbedderConformance):
    """The model itself (an Embedder): it also counts tokens, and knows its window."""

    def test_implements_the_model_protocol(self, backend):
        assert isinstance(backend, Embedder) and isinstance(backend, TokenCounter)
        assert isinstance(backend.max_tokens, int) and backend.max_tokens > 0

    def test_text_beyond_the_window_still_embeds_to_a_unit_vector(self, backend):
        assert backend.count_tokens(LONG_TEXT) > backend.max_tokens
        [vector] = backend.embed_passages([LONG_TEXT])
        assert vector.shape == (backend.dim,) and abs(float(np.linalg.norm(vector)) - 1.0) < UNIT_TOLERANCE


class TokenCounterConformance:
    """Override `backend` (class-scoped) with the TokenCounter under test."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls) -> TokenCounter:
        raise NotImplementedError("a conformance subclass provides the token counter under test")

    def test_token_counts_grow_with_the_text(self, backend):
        assert isinstance(backend, TokenCounter)
        assert backend.count_tokens("") == 0
        one = backend.count_tokens(HOTEL)
        assert isinstance(one, int) and one > 0
        assert backend.count_tokens(f"{HOTEL} {HOTEL}") >= 2 * one - 1  # special tokens are not counted
        assert backend.count_tokens(HOTEL) == one
        assert backend.count_tokens(LONG_TEXT) > backend.max_tokens > 0
