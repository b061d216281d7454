"""Every Reader runs the reader suite (tests/conformance/suites/reader.py): the fake (word overlap), the
`openai_compatible` judge against a chat-completions server on 127.0.0.1 (tests/chat_server.py, started
and shut down here), the memo of recent scores the wiring puts around the reader (over the fake), and
the project's trained cross-encoder (model: skipped with its reason when it cannot be imported or its
artefact does not load). The fake and the judge are built through `make_reader`, so the factory is
exercised as the wiring uses it.
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest

from citadel.reader.base import ReaderError
from citadel.reader.factory import make_reader
from citadel.reader.memo import MemoReader
from citadel.text import content_terms
from tests.chat_server import ChatServer
from tests.conformance.suites.reader import ReaderConformance

# The judge's user message (citadel/reader/judge.py USER): the question, then the fenced text.
PAIR = re.compile(r"Question: (.*)\n\n<<<TEXT>>>\n(.*)\n<<<END TEXT>>>", re.S)


def judge_reply(body: dict) -> tuple[int, dict]:
    """A model that says yes when the text holds the question's words: P(yes) grows with the share
    of the question's content terms in the text, sent as top logprobs the way vLLM sends them."""
    question, text = PAIR.search(body["messages"][-1]["content"]).groups()
    asked = set(content_terms(question))
    share = len(asked & set(content_terms(text))) / len(asked) if asked else 0.0
    p_yes = 0.02 + 0.96 * share
    top = [{"token": "Yes", "logprob": math.log(p_yes)}, {"token": "No", "logprob": math.log(1.0 - p_yes)},
           {"token": "The", "logprob": math.log(0.001)}]
    choice = {"index": 0, "message": {"role": "assistant", "content": "Yes" if p_yes > 0.5 else "No"},
              "logprobs": {"content": [{"token": top[0]["token"], "logprob": top[0]["logprob"],
                                        "top_logprobs": top}]},
              "finish_reason": "length"}
    return 200, {"id": "x", "object": "chat.completion", "choices": [choice]}


@pytest.fixture(scope="module")
def chat_server():
    with ChatServer(judge_reply) as server:
        yield server


class TestFakeReader(ReaderConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return make_reader(SimpleNamespace(reader="fake"))


class TestOpenAICompatibleReader(ReaderConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, chat_server):
        return make_reader(SimpleNamespace(reader="openai_compatible", openai_base_url=chat_server.url,
                                           openai_model="stub-judge", openai_api_key_env="CITADEL_TEST_UNSET_KEY",
                                           openai_timeout_s=5.0))


class TestMemoReader(ReaderConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return MemoReader(make_reader(SimpleNamespace(reader="fake")))


@pytest.mark.model
class TestTrainedReader(ReaderConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        try:
            from citadel.reader.trained import TrainedReader
        except ImportError as error:
            pytest.skip(f"citadel.reader.trained cannot be imported: {error}")
        try:
            return TrainedReader()
        except ReaderError as error:
            pytest.skip(f"the trained reader cannot load its artefact: {error}")
