"""The KeywordIndex backend (tantivy BM25) runs the keyword-index suite
(tests/conformance/suites/keyword_index.py); its own build and query-cleaning rules follow.
"""

from __future__ import annotations

import numpy as np
import pytest

from citadel.index.bm25 import BM25Index
from tests.conformance.suites.keyword_index import K, KeywordIndexConformance, docs  # noqa: F401 (docs: a fixture)


class TestBM25Index(KeywordIndexConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, docs) -> BM25Index:
        texts, ids = docs
        built = BM25Index()
        built.add(texts, ids)
        return built


def test_an_index_is_built_once(docs):
    texts, ids = docs
    built = BM25Index()
    built.add(texts[:2], ids[:2])
    with pytest.raises(RuntimeError):
        built.add(texts[2:4], ids[2:4])
    with pytest.raises(ValueError):
        BM25Index().add(texts[:3], ids[:2])  # a text without an id (or the reverse) is refused


def test_empty_corpus_returns_padding():
    empty = BM25Index()
    empty.add([], np.array([], dtype=np.int64))
    assert len(empty) == 0
    scores, found = empty.search("anything", K)
    assert np.all(found == -1) and np.all(scores == -np.inf)
