"""Layered search (a base then a delta, one row-id space) answers exactly like one index over all rows."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from citadel.index.exact import ExactIndex
from citadel.index.layered import Layer, LayeredVectorIndex

DIM = 16
ROWS = 60


def _unit(rng: np.random.Generator, count: int) -> np.ndarray:
    vectors = rng.standard_normal((count, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _exact(vectors: np.ndarray) -> ExactIndex:
    index = ExactIndex(DIM)
    index.add(vectors, np.arange(len(vectors), dtype=np.int64))
    return index


def _layered(vectors: np.ndarray, split: int) -> LayeredVectorIndex:
    return LayeredVectorIndex([Layer(_exact(vectors[:split]), 0, split),
                               Layer(_exact(vectors[split:]), split, len(vectors) - split)], DIM)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), split=st.integers(1, ROWS - 1), k=st.integers(1, 12),
       share=st.one_of(st.none(), st.floats(0.0, 1.0)))
def test_layered_vector_search_equals_one_exact_index(seed, split, k, share):
    rng = np.random.default_rng(seed)
    vectors, queries = _unit(rng, ROWS), _unit(rng, 3)
    allowed = None if share is None else np.flatnonzero(rng.random(ROWS) < share).astype(np.int64)
    want_scores, want_ids = _exact(vectors).search(queries, k, allowed=allowed)
    got_scores, got_ids = _layered(vectors, split).search(queries, k, allowed=allowed)
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_allclose(got_scores, want_scores, rtol=1e-6, atol=1e-6)  # float32 sums in another order
    if allowed is not None:
        assert set(got_ids[got_ids >= 0].tolist()) <= set(allowed.tolist())


def test_a_single_query_vector_gives_one_row_of_results():
    vectors = _unit(np.random.default_rng(1), ROWS)
    scores, ids = _layered(vectors, 20).search(vectors[45], 3)
    assert ids.shape == (1, 3) and ids[0, 0] == 45 and scores[0, 0] > 0.99
