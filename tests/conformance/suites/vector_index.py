"""The VectorIndex suite (citadel/index/base.py): recall against exact search, inner-product scores
best first, filtered search that returns only allowed ids and still finds the true top k, padding,
ids it does not hold ignored, a single query accepted, and a save/load round trip with identical
results.

Data: deterministic Gaussian clusters of unit vectors, 20k x 384, with non-contiguous row ids so the
id translation is exercised. Every index is built once per test module (`built_indexes`), whichever
classes share it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from citadel.index.base import VectorIndex, VectorSearch
from citadel.index.exact import ExactIndex
from citadel.index.factory import VECTOR_BACKENDS, load_vector_index, make_vector_index
from citadel.index.hnsw import HNSWIndex, ef_for_selectivity

DIM = 384
NUM_VECTORS = 20_000
NUM_QUERIES = 100
NUM_CLUSTERS = 100
# Noise per dimension around each cluster centre; 0.5 puts a point at cosine ~0.9 to its centre,
# so neighbourhoods are tight but far from trivial.
CLUSTER_SPREAD = 0.5
K = 10
MIN_RECALL = 0.95
SELECTIVITIES = (0.01, 0.1)
ID_STRIDE, ID_OFFSET = 3, 7  # row ids 7, 10, 13, ...: never equal to internal positions
SCORE_TOLERANCE = 1e-2  # fp16 storage / re-score copies round scores slightly


def clustered_unit_vectors(rng: np.random.Generator, centres: np.ndarray, count: int) -> np.ndarray:
    assignment = rng.integers(0, len(centres), count)
    points = centres[assignment] + CLUSTER_SPREAD * rng.standard_normal((count, DIM), dtype=np.float32)
    return points / np.linalg.norm(points, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def dataset() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20261130)
    centres = rng.standard_normal((NUM_CLUSTERS, DIM), dtype=np.float32)
    return {
        "vectors": clustered_unit_vectors(rng, centres, NUM_VECTORS),
        "queries": clustered_unit_vectors(rng, centres, NUM_QUERIES),
        "ids": np.arange(NUM_VECTORS, dtype=np.int64) * ID_STRIDE + ID_OFFSET,
    }


@pytest.fixture(scope="module")
def reference(dataset) -> ExactIndex:
    index = ExactIndex(DIM)
    index.add(dataset["vectors"], dataset["ids"])
    return index


@pytest.fixture(scope="module")
def built_indexes() -> dict[tuple, VectorIndex]:
    """Cache of built indexes keyed by (kind, params), shared by the backend variants."""
    return {}


def built_index(kind: str, params: dict, load_overrides: dict | None, dataset, built_indexes: dict,
                saved_to: Path) -> VectorIndex:
    """The index of `kind` over the dataset (built once per module); with `load_overrides`, a copy
    saved to `saved_to` and loaded with them."""
    key = (kind, tuple(sorted(params.items())))
    if key not in built_indexes:
        built = make_vector_index(kind, DIM, **params)
        built.add(dataset["vectors"], dataset["ids"])
        built_indexes[key] = built
    if load_overrides is None:
        return built_indexes[key]
    built_indexes[key].save(saved_to)
    return VECTOR_BACKENDS[kind].load(saved_to, **load_overrides)


def recall(found_ids: np.ndarray, true_ids: np.ndarray) -> float:
    """Mean over queries of |found ∩ truth| / |truth|, ignoring -1 padding."""
    per_query = []
    for found, truth in zip(found_ids, true_ids):
        truth_set = set(truth[truth >= 0].tolist())
        if truth_set:
            per_query.append(len(truth_set & set(found[found >= 0].tolist())) / len(truth_set))
    return float(np.mean(per_query))


def random_allowed(ids: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(ids, int(len(ids) * fraction), replace=False))


def filtered_ef(index: VectorIndex, fraction: float) -> int | None:
    """What the retrieval planner passes: a raised efSearch for HNSW, the default elsewhere."""
    if isinstance(index, HNSWIndex):
        return ef_for_selectivity(K, fraction, base_ef=index.ef_search)
    return None


class VectorIndexConformance:
    """Override `backend` (class-scoped) with the index under test over `dataset`;
    `filtered_queries`: fewer queries for a selectivity a backend searches slowly."""

    filtered_queries: dict[float, int] = {}

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls) -> VectorIndex:
        raise NotImplementedError("a conformance subclass provides the index under test")

    def test_implements_protocol(self, backend):
        assert isinstance(backend, VectorIndex) and isinstance(backend, VectorSearch)
        assert VECTOR_BACKENDS[backend.kind] is type(backend), "kind names the backend the factory reopens"
        assert backend.dim == DIM
        assert len(backend) == NUM_VECTORS

    def test_unfiltered_recall_against_exact(self, backend, dataset, reference):
        _, true_ids = reference.search(dataset["queries"], K)
        scores, ids = backend.search(dataset["queries"], K)
        assert scores.shape == ids.shape == (NUM_QUERIES, K)
        assert scores.dtype == np.float32 and ids.dtype == np.int64
        assert recall(ids, true_ids) >= MIN_RECALL

    def test_scores_are_inner_products_best_first(self, backend, dataset):
        by_id = dict(zip(dataset["ids"].tolist(), range(NUM_VECTORS)))
        scores, ids = backend.search(dataset["queries"][:5], K)
        for query, row_scores, row_ids in zip(dataset["queries"][:5], scores, ids):
            assert np.all(np.diff(row_scores) <= SCORE_TOLERANCE)
            expected = dataset["vectors"][[by_id[i] for i in row_ids.tolist()]] @ query
            np.testing.assert_allclose(row_scores, expected, atol=SCORE_TOLERANCE)

    @pytest.mark.parametrize("fraction", SELECTIVITIES)
    def test_filtered_search_only_allowed_and_finds_true_top_k(
        self, backend, dataset, reference, fraction
    ):
        queries = dataset["queries"][: self.filtered_queries.get(fraction, NUM_QUERIES)]
        allowed = random_allowed(dataset["ids"], fraction, seed=int(fraction * 1000))
        _, true_ids = reference.search(queries, K, allowed=allowed)
        _, ids = backend.search(queries, K, allowed=allowed, ef_search=filtered_ef(backend, fraction))
        returned = ids[ids >= 0]
        assert np.isin(returned, allowed).all(), "a disallowed id was returned"
        assert recall(ids, true_ids) >= MIN_RECALL

    def test_padding_when_allowed_has_fewer_than_k(self, backend, dataset):
        allowed = dataset["ids"][[5, 500, 5000]]
        scores, ids = backend.search(dataset["queries"][:3], K, allowed=allowed)
        for row_scores, row_ids in zip(scores, ids):
            assert sorted(row_ids[:3].tolist()) == allowed.tolist()
            assert np.all(np.isfinite(row_scores[:3]))
            assert np.all(row_ids[3:] == -1) and np.all(row_scores[3:] == -np.inf)

    def test_empty_allowed_returns_only_padding(self, backend, dataset):
        scores, ids = backend.search(dataset["queries"][:4], K, allowed=np.array([], dtype=np.int64))
        assert np.all(ids == -1) and np.all(scores == -np.inf)

    def test_allowed_ids_the_index_does_not_hold_are_ignored(self, backend, dataset):
        unknown = np.array([0, 1, 2, 10**12], dtype=np.int64)  # below the first row id, and far above
        scores, ids = backend.search(dataset["queries"][:2], K, allowed=unknown)
        assert np.all(ids == -1) and np.all(scores == -np.inf)

    def test_single_query_vector_is_accepted(self, backend, dataset):
        _, batch_ids = backend.search(dataset["queries"][:1], K)
        _, single_ids = backend.search(dataset["queries"][0], K)
        np.testing.assert_array_equal(single_ids, batch_ids)

    def test_save_load_round_trip_gives_identical_results(self, backend, dataset, tmp_path):
        allowed = random_allowed(dataset["ids"], 0.1, seed=7)
        queries = dataset["queries"][:20]
        before = [backend.search(queries, K), backend.search(queries, K, allowed=allowed)]
        backend.save(tmp_path)
        reloaded = load_vector_index(tmp_path)
        assert type(reloaded) is type(backend) and len(reloaded) == len(backend)
        assert isinstance(reloaded, VectorIndex) and reloaded.dim == backend.dim
        after = [reloaded.search(queries, K), reloaded.search(queries, K, allowed=allowed)]
        for (scores_before, ids_before), (scores_after, ids_after) in zip(before, after):
            np.testing.assert_array_equal(ids_after, ids_before)
            np.testing.assert_allclose(scores_after, scores_before, rtol=0, atol=1e-6)
