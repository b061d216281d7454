"""One suite every Reader passes: the fake (word overlap), the `openai_compatible` judge against a
chat-completions server on 127.0.0.1 (tests/chat_server.py, started and shut down here), and the
project's trained cross-encoder (model: skipped with its reason when it cannot be imported or its
artefact does not load).

The contract the answer path relies on (citadel/reader/base.py): one probability in [0, 1] per text,
in order; [] for no texts; the same scores for the same input; any question (very long, empty,
non-Latin scripts) scored without raising; more than MAX_TEXTS texts is a ReaderError; and a text
that states the answer scores above an unrelated one on plain, unambiguous cases. The fake and the
judge are built through `make_reader`, so the factory is exercised as the wiring uses it.
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest

from citadel.answer.text import content_terms
from citadel.reader.base import MAX_TEXTS, Reader, ReaderError
from citadel.reader.factory import make_reader
from tests.chat_server import ChatServer

# (question, a sentence that states its answer, an unrelated sentence)
TRIPLES = [
    ("How many days of annual leave do new employees get?",
     "New employees get 13 days of annual leave each year.", "The office cafeteria opens at noon."),
    ("Who approves travel for contractors?",
     "Travel for contractors is approved by the contracting officer.", "Passwords must be changed every ninety days."),
    ("What is the per diem for meals in domestic cities?",
     "The per diem for meals in domestic cities is 75 USD per day.", "Laptops are replaced every four years."),
]
QUESTION, ANSWER, UNRELATED = TRIPLES[0]
TEXTS = [ANSWER, UNRELATED, TRIPLES[1][1], TRIPLES[2][1]]
ODD_QUESTIONS = {
    "10k_chars": ("annual leave " * 770)[:10_000],  # cut by bounded() to MAX_QUESTION_CHARS
    "empty": "",
    "japanese": "新入社員の年次有給休暇は何日ですか？",
    "arabic": "كم عدد أيام الإجازة السنوية للموظفين الجدد؟",
}
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


def _trained(server) -> Reader:
    try:
        from citadel.reader.trained import TrainedReader
    except ImportError as error:
        pytest.skip(f"citadel.reader.trained cannot be imported: {error}")
    try:
        return TrainedReader()
    except ReaderError as error:
        pytest.skip(f"the trained reader cannot load its artefact: {error}")


BACKENDS = {
    "fake": lambda server: make_reader(SimpleNamespace(reader="fake")),
    "openai_compatible": lambda server: make_reader(SimpleNamespace(
        reader="openai_compatible", openai_base_url=server.url, openai_model="stub-judge",
        openai_api_key_env="CITADEL_TEST_UNSET_KEY", openai_timeout_s=5.0)),
    "trained": pytest.param(_trained, marks=pytest.mark.model),
}


@pytest.fixture(scope="module", params=list(BACKENDS.values()), ids=list(BACKENDS))
def reader(request, chat_server) -> Reader:
    return request.param(chat_server)


def test_implements_protocol(reader):
    assert isinstance(reader, Reader)
    assert isinstance(reader.model_id, str) and reader.model_id


def test_one_probability_per_text_in_order(reader):
    scores = reader.score(QUESTION, TEXTS)
    assert len(scores) == len(TEXTS)
    assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)
    reversed_scores = reader.score(QUESTION, list(reversed(TEXTS)))
    assert reversed_scores == pytest.approx(list(reversed(scores)), abs=1e-6)


def test_no_texts_gives_empty_list(reader):
    assert reader.score(QUESTION, []) == []


def test_deterministic(reader):
    assert reader.score(QUESTION, TEXTS) == reader.score(QUESTION, TEXTS)


@pytest.mark.parametrize("question", list(ODD_QUESTIONS.values()), ids=list(ODD_QUESTIONS))
def test_any_question_is_scored(reader, question):
    scores = reader.score(question, [ANSWER, UNRELATED])
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)


def test_more_than_max_texts_raises(reader):
    with pytest.raises(ReaderError):
        reader.score(QUESTION, [UNRELATED] * (MAX_TEXTS + 1))


@pytest.mark.parametrize("question, answer, unrelated", TRIPLES, ids=["leave", "travel", "per_diem"])
def test_answering_text_scores_higher(reader, question, answer, unrelated):
    stated, other = reader.score(question, [answer, unrelated])
    assert stated > other
