"""One suite every VectorIndex backend passes (exact, HNSW fp32/fp16, DiskANN in both filter modes),
and the search half of it (VectorSearch) for the layered view retrieval searches a partition through
(an HNSW base plus an exact delta, one row-id space).

Data: deterministic Gaussian clusters of unit vectors, 20k x 384, with non-contiguous row ids so the
id translation is exercised.  Every index is built once per module.
"""

from __future__ import annotations

import numpy as np
import pytest

from citadel.index.base import VectorIndex, VectorSearch
from citadel.index.exact import ExactIndex
from citadel.index.factory import VECTOR_BACKENDS, load_vector_index, make_vector_index
from citadel.index.hnsw import HNSWIndex, ef_for_selectivity
from citadel.index.layered import Layer, LayeredVectorIndex

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
# The DiskANN post-filter path at 1% runs search lists of ~4000 (~0.1 s a query on 2 cores); the
# planner sends such selective filters to exact search, so that case checks fewer queries.
SLOW_FILTER_CASES = {("diskann-postfilter", 0.01): 25}
SCORE_TOLERANCE = 1e-2  # fp16 storage / re-score copies round scores slightly

# name -> (kind, constructor params, load overrides applied to a saved copy)
BACKENDS = {
    "exact": ("exact", {}, None),
    "hnsw": ("hnsw", {}, None),
    # Same graph, but every filtered search walks the graph with the filter (no exact shortcut).
    "hnsw-ingraph": ("hnsw", {}, {"exact_max_allowed": 0}),
    "hnsw-fp16": ("hnsw", {"storage": "fp16"}, None),
    "diskann": ("diskann", {}, None),
    # Same DiskANN files, but every filtered search takes the growing-candidate-list path.
    "diskann-postfilter": ("diskann", {}, {"exact_rescore_max_allowed": 0}),
}


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


@pytest.fixture(scope="module", params=list(BACKENDS))
def index(request, dataset, built_indexes, tmp_path_factory) -> VectorIndex:
    kind, params, load_overrides = BACKENDS[request.param]
    key = (kind, tuple(sorted(params.items())))
    if key not in built_indexes:
        built = make_vector_index(kind, DIM, **params)
        built.add(dataset["vectors"], dataset["ids"])
        built_indexes[key] = built
    if load_overrides is None:
        return built_indexes[key]
    saved = tmp_path_factory.mktemp(f"{request.param}-saved")
    built_indexes[key].save(saved)
    return VECTOR_BACKENDS[kind].load(saved, **load_overrides)


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


def test_implements_protocol(index):
    assert isinstance(index, VectorIndex) and isinstance(index, VectorSearch)
    assert VECTOR_BACKENDS[index.kind] is type(index), "kind names the backend the factory reopens"
    assert index.dim == DIM
    assert len(index) == NUM_VECTORS


def test_unfiltered_recall_against_exact(index, dataset, reference):
    _, true_ids = reference.search(dataset["queries"], K)
    scores, ids = index.search(dataset["queries"], K)
    assert scores.shape == ids.shape == (NUM_QUERIES, K)
    assert scores.dtype == np.float32 and ids.dtype == np.int64
    assert recall(ids, true_ids) >= MIN_RECALL


def test_scores_are_inner_products_best_first(index, dataset):
    by_id = dict(zip(dataset["ids"].tolist(), range(NUM_VECTORS)))
    scores, ids = index.search(dataset["queries"][:5], K)
    for query, row_scores, row_ids in zip(dataset["queries"][:5], scores, ids):
        assert np.all(np.diff(row_scores) <= SCORE_TOLERANCE)
        expected = dataset["vectors"][[by_id[i] for i in row_ids.tolist()]] @ query
        np.testing.assert_allclose(row_scores, expected, atol=SCORE_TOLERANCE)


@pytest.mark.parametrize("fraction", SELECTIVITIES)
def test_filtered_search_only_allowed_and_finds_true_top_k(
    request, index, dataset, reference, fraction
):
    backend_name = request.node.callspec.params["index"]
    queries = dataset["queries"][: SLOW_FILTER_CASES.get((backend_name, fraction), NUM_QUERIES)]
    allowed = random_allowed(dataset["ids"], fraction, seed=int(fraction * 1000))
    _, true_ids = reference.search(queries, K, allowed=allowed)
    _, ids = index.search(queries, K, allowed=allowed, ef_search=filtered_ef(index, fraction))
    returned = ids[ids >= 0]
    assert np.isin(returned, allowed).all(), "a disallowed id was returned"
    assert recall(ids, true_ids) >= MIN_RECALL


def test_padding_when_allowed_has_fewer_than_k(index, dataset):
    allowed = dataset["ids"][[5, 500, 5000]]
    scores, ids = index.search(dataset["queries"][:3], K, allowed=allowed)
    for row_scores, row_ids in zip(scores, ids):
        assert sorted(row_ids[:3].tolist()) == allowed.tolist()
        assert np.all(np.isfinite(row_scores[:3]))
        assert np.all(row_ids[3:] == -1) and np.all(row_scores[3:] == -np.inf)


def test_empty_allowed_returns_only_padding(index, dataset):
    scores, ids = index.search(dataset["queries"][:4], K, allowed=np.array([], dtype=np.int64))
    assert np.all(ids == -1) and np.all(scores == -np.inf)


def test_allowed_ids_the_index_does_not_hold_are_ignored(index, dataset):
    unknown = np.array([0, 1, 2, 10**12], dtype=np.int64)  # below the first row id, and far above
    scores, ids = index.search(dataset["queries"][:2], K, allowed=unknown)
    assert np.all(ids == -1) and np.all(scores == -np.inf)


def test_single_query_vector_is_accepted(index, dataset):
    _, batch_ids = index.search(dataset["queries"][:1], K)
    _, single_ids = index.search(dataset["queries"][0], K)
    np.testing.assert_array_equal(single_ids, batch_ids)


def test_save_load_round_trip_gives_identical_results(index, dataset, tmp_path):
    allowed = random_allowed(dataset["ids"], 0.1, seed=7)
    queries = dataset["queries"][:20]
    before = [index.search(queries, K), index.search(queries, K, allowed=allowed)]
    index.save(tmp_path)
    reloaded = load_vector_index(tmp_path)
    assert type(reloaded) is type(index) and len(reloaded) == len(index)
    assert isinstance(reloaded, VectorIndex) and reloaded.dim == index.dim
    after = [reloaded.search(queries, K), reloaded.search(queries, K, allowed=allowed)]
    for (scores_before, ids_before), (scores_after, ids_after) in zip(before, after):
        np.testing.assert_array_equal(ids_after, ids_before)
        np.testing.assert_allclose(scores_after, scores_before, rtol=0, atol=1e-6)


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
