"""The KeywordIndex suite (citadel/index/base.py): what retrieval's keyword leg relies on (rare terms
rank first, stemming, filtering inside the search with unchanged scores, padding, any user text is a
safe query) and what segment builds rely on (save, load the same index).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from citadel.index.base import KeywordIndex
from citadel.index.bm25 import clean_query_text

K = 10
NUM_DOCS = 60
ID_STRIDE, ID_OFFSET = 5, 3  # row ids 3, 8, 13, ...
COMMON_WORDS = ["policy", "employee", "travel", "expense", "report", "manager", "approval", "budget"]
RARE_DOCUMENT = "The zirconium centrifuge calibration procedure for the travel policy annex."
RARE_QUERY = "zirconium centrifuge calibration"
SYNTAX_QUERIES = [
    "", "   ", '"', '"unterminated phrase', "title:travel", "(travel", "travel)", "+travel -policy",
    "travel^2", "travel~1", "trav*", "tr?vel", "a\\b", "/regex.*/", "[a TO z]", "{a TO z}", "!travel",
    "AND", "OR", "NOT", "travel AND", "NOT travel", "IN [1 2]", "row:5", "*", ":", "&&", "||",
    "travel && policy", "\x00", "émigré naïve café", "旅行 政策", "🙂", "--", "::::",
]


def corpus() -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(11)
    texts = [" ".join(rng.choice(COMMON_WORDS, size=12).tolist()) for _ in range(NUM_DOCS - 1)]
    texts.append(RARE_DOCUMENT)
    ids = np.arange(NUM_DOCS, dtype=np.int64) * ID_STRIDE + ID_OFFSET
    return texts, ids


@pytest.fixture(scope="module")
def docs() -> tuple[list[str], np.ndarray]:
    return corpus()


class KeywordIndexConformance:
    """Override `backend` (class-scoped) with the index under test, built over `docs` (the suite's tests
    call it `index`)."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        raise NotImplementedError("a conformance subclass provides the backend under test")

    @pytest.fixture(scope="class")
    @classmethod
    def index(cls, backend):
        return backend

    def test_implements_protocol(self, index):
        assert isinstance(index, KeywordIndex)
        assert isinstance(index.kind, str) and index.kind
        assert len(index) == NUM_DOCS

    def test_document_with_rare_query_terms_ranks_first(self, index, docs):
        _, ids = docs
        scores, found = index.search(RARE_QUERY, K)
        assert found[0] == ids[-1]
        assert scores.dtype == np.float32 and found.dtype == np.int64
        assert scores[0] > 0 and np.all(np.diff(scores[np.isfinite(scores)]) <= 0)

    def test_stemming_matches_inflected_forms(self, index, docs):
        _, ids = docs
        _, found = index.search("calibrations centrifuges", K)
        assert found[0] == ids[-1]

    def test_results_are_padded(self, index, docs):
        scores, found = index.search(RARE_QUERY, K)
        assert found.shape == scores.shape == (K,)
        assert found[1] == -1 and scores[1] == -np.inf  # only one document has those words

    def test_no_match_returns_padding(self, index):
        scores, found = index.search("xylophone", K)
        assert np.all(found == -1) and np.all(scores == -np.inf)

    def test_empty_allowed_returns_padding(self, index):
        scores, found = index.search("travel policy", K, allowed=np.array([], dtype=np.int64))
        assert np.all(found == -1) and np.all(scores == -np.inf)

    def test_filter_keeps_the_unfiltered_bm25_scores(self, index, docs):
        """The filter only removes documents: allowed ones keep exactly their unfiltered scores."""
        _, ids = docs
        allowed = ids[::3]
        all_scores, all_found = index.search("travel expense approval", NUM_DOCS)
        expected = {i: s for i, s in zip(all_found.tolist(), all_scores.tolist()) if i in set(allowed.tolist())}
        scores, found = index.search("travel expense approval", NUM_DOCS, allowed=allowed)
        got = {i: s for i, s in zip(found.tolist(), scores.tolist()) if i >= 0}
        assert got.keys() == expected.keys()
        for row, score in got.items():
            assert score == pytest.approx(expected[row], rel=1e-6)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        allowed_positions=st.lists(st.integers(0, NUM_DOCS - 1), max_size=NUM_DOCS, unique=True),
        stray_ids=st.lists(st.integers(-5, 10_000), max_size=5),
        query_words=st.lists(st.sampled_from(COMMON_WORDS + ["zirconium", "nothing"]), min_size=1, max_size=4),
        k=st.integers(1, 20),
    )
    def test_filtered_search_never_returns_disallowed_ids(self, index, docs, allowed_positions, stray_ids, query_words, k):
        _, ids = docs
        allowed = np.unique(np.concatenate([ids[allowed_positions], np.asarray(stray_ids, dtype=np.int64)]))
        scores, found = index.search(" ".join(query_words), k, allowed=allowed)
        returned = found[found >= 0]
        assert np.isin(returned, allowed).all()
        assert len(set(returned.tolist())) == returned.size
        assert np.all(np.isfinite(scores[found >= 0])) and np.all(scores[found < 0] == -np.inf)

    @pytest.mark.parametrize("query", SYNTAX_QUERIES)
    def test_query_syntax_characters_never_raise(self, index, query):
        scores, found = index.search(query, K)
        assert found.shape == (K,)
        if not clean_query_text(query):
            assert np.all(found == -1)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(query=st.text(max_size=80))
    def test_arbitrary_text_never_raises(self, index, query):
        index.search(query, K)
        index.search(query, K, allowed=np.array([3, 8], dtype=np.int64))

    def test_save_load_round_trip(self, index, tmp_path):
        queries = [RARE_QUERY, "travel policy", "manager budget approval"]
        before = [index.search(q, K) for q in queries]
        index.save(tmp_path)
        reloaded = type(index).load(tmp_path)
        assert isinstance(reloaded, KeywordIndex) and len(reloaded) == NUM_DOCS
        for query, (scores, found) in zip(queries, before):
            reloaded_scores, reloaded_found = reloaded.search(query, K)
            np.testing.assert_array_equal(reloaded_found, found)
            np.testing.assert_allclose(reloaded_scores, scores, rtol=1e-6)
        # The saved-from index keeps working after its build files moved.
        np.testing.assert_array_equal(index.search(RARE_QUERY, K)[1], before[0][1])
