"""Every VectorIndex backend runs the vector-index suite (tests/conformance/suites/vector_index.py):
exact, HNSW fp32/fp16 (and in-graph filtering), DiskANN in both filter modes; then the search half of
it (VectorSearch) for the layered view retrieval searches a partition through (an HNSW base plus an
exact delta, one row-id space), and the backend-independent pieces.
"""

from __future__ import annotations

import numpy as np
import pytest

from citadel.index.base import VectorSearch
from citadel.index.exact import ExactIndex
from citadel.index.factory import VECTOR_BACKENDS, make_vector_index
from citadel.index.hnsw import ef_for_selectivity
from citadel.index.layered import Layer, LayeredVectorIndex
from tests.conformance.suites.vector_index import (DIM, MIN_RECALL, SCORE_TOLERANCE, SELECTIVITIES, K,
                                                   VectorIndexConformance, built_index, built_indexes, dataset,
                                                   random_allowed, recall, reference)  # noqa: F401 (fixtures)


class TestExactIndex(VectorIndexConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, dataset, built_indexes, tmp_path_factory):
        return built_index("exact", {}, None, dataset, built_indexes, tmp_path_factory.mktemp("exact-saved"))


class TestHNSWIndex(VectorIndexConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, dataset, built_indexes, tmp_path_factory):
        return built_index("hnsw", {}, None, dataset, built_indexes, tmp_path_factory.mktemp("hnsw-saved"))


class TestHNSWInGraphFiltering(VectorIndexConformance):
    """Same graph, but every filtered search walks the graph with the filter (no exact shortcut)."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, dataset, built_indexes, tmp_path_factory):
        return built_index("hnsw", {}, {"exact_max_allowed": 0}, dataset, built_indexes, tmp_path_factory.mktemp("hnsw-ingraph-saved"))


class TestHNSWFp16Index(VectorIndexConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, dataset, built_indexes, tmp_path_factory):
        return built_index("hnsw", {"storage": "fp16"}, None, dataset, built_indexes, tmp_path_factory.mktemp("hnsw-fp16-saved"))


class TestDiskANNIndex(VectorIndexConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, dataset, built_indexes, tmp_path_factory):
        return built_index("diskann", {}, None, dataset, built_indexes, tmp_path_factory.mktemp("diskann-saved"))


class TestDiskANNPostFilter(VectorIndexConformance):
    """Same DiskANN files, but every filtered search takes the growing-candidate-list path."""

    # The post-filter path at 1% runs search lists of ~4000 (~0.1 s a query on 2 cores); the planner
    # sends such selective filters to exact search, so that case checks fewer queries.
    filtered_queries = {0.01: 25}

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, dataset, built_indexes, tmp_path_factory):
        return built_index("diskann", {}, {"exact_rescore_max_allowed": 0}, dataset, built_indexes, tmp_path_factory.mktemp("diskann-postfilter-saved"))


# -- backend-independent pieces ---------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(VECTOR_BACKENDS))
def test_tiny_index_with_identity_ids_pads_to_k(kind):
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((5, 16), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = make_vector_index(kind, 16)
    index.add(vectors, np.arange(5))
    scores, ids = index.search(vectors[:2], 8)
    assert ids[0, 0] == 0 and ids[1, 0] == 1
    assert sorted(ids[0, :5].tolist()) == [0, 1, 2, 3, 4]
    assert np.all(ids[:, 5:] == -1) and np.all(scores[:, 5:] == -np.inf)


def test_factory_rejects_unknown_kind():
    with pytest.raises(ValueError):
        make_vector_index("annoy", DIM)


def test_ef_for_selectivity_grows_with_selectivity_and_is_bounded():
    base, ceiling = 64, 4096
    assert ef_for_selectivity(K, 1.0, base, ceiling) == base
    assert ef_for_selectivity(K, 0.1, base, ceiling) >= K / 0.1
    assert ef_for_selectivity(K, 0.01, base, ceiling) > ef_for_selectivity(K, 0.1, base, ceiling)
    assert ef_for_selectivity(K, 1e-6, base, ceiling) == ceiling
    assert ef_for_selectivity(K, 0.0, base, ceiling) == base
    assert ef_for_selectivity(500, 1.0, base, ceiling) == 500  # never below k


# -- VectorSearch: the layered view of a partition (a base graph, then an exact delta) -------------

LAYERED_ROWS, LAYERED_BASE_ROWS = 4_000, 3_000  # partition row ids 0..3999; the delta holds 3000..3999


@pytest.fixture(scope="module")
def layered(dataset) -> tuple[LayeredVectorIndex, ExactIndex]:
    """(the layered view, an exact index over the same rows under the same partition row ids)."""
    vectors = dataset["vectors"][:LAYERED_ROWS]
    base = make_vector_index("hnsw", DIM)
    base.add(vectors[:LAYERED_BASE_ROWS], np.arange(LAYERED_BASE_ROWS, dtype=np.int64))
    delta = ExactIndex(DIM)
    delta.add(vectors[LAYERED_BASE_ROWS:], np.arange(LAYERED_ROWS - LAYERED_BASE_ROWS, dtype=np.int64))
    view = LayeredVectorIndex([Layer(base, 0, LAYERED_BASE_ROWS),
                               Layer(delta, LAYERED_BASE_ROWS, LAYERED_ROWS - LAYERED_BASE_ROWS)], DIM)
    truth = ExactIndex(DIM)
    truth.add(vectors, np.arange(LAYERED_ROWS, dtype=np.int64))
    return view, truth


def test_layered_view_implements_vector_search(layered):
    view, _ = layered
    assert isinstance(view, VectorSearch)
    assert view.dim == DIM and len(view) == LAYERED_ROWS


@pytest.mark.parametrize("fraction", (None, *SELECTIVITIES))
def test_layered_view_finds_the_true_top_k_of_both_layers_within_allowed(layered, dataset, fraction):
    view, truth = layered
    queries = dataset["queries"][:50]
    allowed = None if fraction is None else random_allowed(np.arange(LAYERED_ROWS, dtype=np.int64), fraction, 3)
    _, true_ids = truth.search(queries, K, allowed=allowed)
    scores, ids = view.search(queries, K, allowed=allowed)
    assert scores.shape == ids.shape == (len(queries), K)
    assert scores.dtype == np.float32 and ids.dtype == np.int64
    assert np.all(np.diff(scores, axis=1) <= SCORE_TOLERANCE), "best first"
    if allowed is not None:
        assert np.isin(ids[ids >= 0], allowed).all(), "a disallowed id was returned"
    assert recall(ids, true_ids) >= MIN_RECALL
    assert (ids >= LAYERED_BASE_ROWS).any() and ((ids >= 0) & (ids < LAYERED_BASE_ROWS)).any(), "both layers answer"


def test_layered_view_pads_and_takes_a_single_query(layered, dataset):
    view, _ = layered
    allowed = np.array([5, LAYERED_BASE_ROWS + 5], dtype=np.int64)  # one row in each layer
    scores, ids = view.search(dataset["queries"][0], K, allowed=allowed)
    assert ids.shape == (1, K) and sorted(ids[0, :2].tolist()) == allowed.tolist()
    assert np.all(ids[0, 2:] == -1) and np.all(scores[0, 2:] == -np.inf)
    scores, ids = view.search(dataset["queries"][:2], K, allowed=np.array([], dtype=np.int64))
    assert np.all(ids == -1) and np.all(scores == -np.inf)
