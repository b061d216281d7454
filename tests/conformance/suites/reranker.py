"""The Reranker suite (citadel/rerank/base.py).

The contract the answer service relies on: at most `top_n` passages, all from the input and each
once, best first, copies carrying the new score with every other field unchanged, the input left as
it was, the same answer for the same input in any order, `top_n` results a prefix of a longer
ranking, `enabled` saying whether it scores at all, and `RerankError` when its model is missing.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from pathlib import Path

import pytest

from citadel.rerank.base import Reranker, RerankError
from citadel.types import Passage

WORDS = ("travel approval manager laptop ticket support security report stolen per diem meals "
         "contractors officer booking flights desk who approves for the a is").split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TEXTS = ["travel approval manager", "laptop ticket support", "security report stolen laptop",
         "per diem meals", "contractors officer approval", "booking flights desk"]
QUERY = "who approves travel for contractors"
TOP_NS = (0, 1, 3, len(TEXTS), len(TEXTS) + 5)
SCORE_TOLERANCE = 1e-4


def candidates() -> list[Passage]:
    """Fused candidates as the retriever hands them over: best first by fusion score."""
    return [Passage(f"t:d{i}:v1:{i:04d}", text, f"d{i}", f"Doc {i}", 1, "Policy > Section", None, f"d{i}.md",
                    1.0 / (i + 1), section_index=i, vector_rank=i + 1, keyword_rank=None)
            for i, text in enumerate(TEXTS)]


def write_tiny_cross_encoder(directory: Path) -> Path:
    """A one-layer BERT cross-encoder over a tiny WordPiece vocabulary, randomly initialised."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    vocab = {token: index for index, token in enumerate(SPECIAL + WORDS)}
    torch.manual_seed(0)
    # A wide initialiser spreads the random scores apart, so ties cannot hide an ordering bug.
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=128, num_labels=1, initializer_range=0.3)
    BertForSequenceClassification(config).save_pretrained(directory)
    BertTokenizer(vocab=vocab).save_pretrained(directory)
    return directory


class RerankerConformance:
    """Override `backend` (class-scoped) with the reranker under test, and `broken` with one whose
    model is missing where it has a model to miss."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls) -> Reranker:
        raise NotImplementedError("a conformance subclass provides the reranker under test")

    @pytest.fixture
    def broken(self) -> Reranker:
        pytest.skip("this reranker has no model to miss")

    @pytest.fixture(scope="class")
    @classmethod
    def full_ranking(cls, backend) -> list[Passage]:
        return backend.rerank(QUERY, candidates(), top_n=len(TEXTS))

    def test_implements_protocol(self, backend):
        assert isinstance(backend, Reranker)
        assert isinstance(backend.model_id, str) and backend.model_id
        assert isinstance(backend.enabled, bool)


    @pytest.mark.parametrize("top_n", TOP_NS)
    def test_at_most_top_n_distinct_input_passages_best_first(self, backend, top_n):
        given = candidates()
        ranked = backend.rerank(QUERY, given, top_n=top_n)
        assert isinstance(ranked, list) and len(ranked) == min(top_n, len(given))
        ids = [p.chunk_id for p in ranked]
        assert len(set(ids)) == len(ids) and set(ids) <= {p.chunk_id for p in given}
        scores = [p.score for p in ranked]
        assert all(a >= b for a, b in zip(scores, scores[1:])), scores


    def test_a_shorter_ranking_is_a_prefix_of_a_longer_one(self, backend, full_ranking):
        top = backend.rerank(QUERY, candidates(), top_n=3)
        assert [p.chunk_id for p in top] == [p.chunk_id for p in full_ranking[:3]]
        assert [p.score for p in top] == pytest.approx([p.score for p in full_ranking[:3]], abs=SCORE_TOLERANCE)


    def test_only_the_score_changes_and_the_input_is_left_alone(self, backend):
        given = candidates()
        before = copy.deepcopy(given)
        ranked = backend.rerank(QUERY, given, top_n=len(given))
        assert given == before, "the caller's passages were changed"
        by_id = {p.chunk_id: p for p in before}
        for passage in ranked:
            assert passage == dataclasses.replace(by_id[passage.chunk_id], score=passage.score)


    def test_deterministic_and_independent_of_input_order(self, backend, full_ranking):
        shuffled = candidates()
        random.Random(7).shuffle(shuffled)
        again = backend.rerank(QUERY, shuffled, top_n=len(TEXTS))
        expected = {p.chunk_id: p.score for p in full_ranking}
        assert {p.chunk_id: p.score for p in again} == pytest.approx(expected, abs=SCORE_TOLERANCE)
        assert [p.chunk_id for p in again] == [p.chunk_id for p in full_ranking]


    def test_no_candidates_give_no_passages(self, backend):
        assert backend.rerank(QUERY, [], top_n=8) == []


    def test_enabled_says_whether_it_scores(self, backend, full_ranking):
        """A disabled backend keeps the fused order and scores (so the gate must not read them as rerank
        scores); an enabled one replaces the fusion scores with its own."""
        fused = candidates()
        if backend.enabled:
            assert [p.score for p in full_ranking] != [p.score for p in fused]
        else:
            assert [(p.chunk_id, p.score) for p in full_ranking] == [(p.chunk_id, p.score) for p in fused]


    def test_a_missing_model_raises_rerank_error(self, broken):
        assert isinstance(broken, Reranker)
        with pytest.raises(RerankError) as raised:
            broken.rerank(QUERY, candidates(), top_n=3)
        assert raised.value.code == "model_missing"
