"""The three outcomes (DESIGN.md §4 step 6) through the answer service, with the deterministic fake
reader: an asserted answer when a top sentence holds the asked slot about its subject; not_confirmed
(nothing asserted, the closest section cited, a person offered) when the topic is found but not the
fact; a bare refusal when nothing is on topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from citadel.answer.confirm import ConfirmSettings, confirm, not_confirmed_reply
from citadel.answer.extractive import ExtractiveGenerator
from citadel.answer.service import ANSWERED, NOT_CONFIRMED, REFUSED
from citadel.answer.slots import asked_slot
from citadel.ingest.sources import AclSpec, discover
from citadel.prompting.source import Source
from citadel.reader.fake import FakeReader
from citadel.types import Passage, Principal

STAFF = Principal("t", "u1", frozenset({"staff"}))
HANDBOOK = """# Office handbook

## Per diem

Travel is booked through the travel desk. The per diem for meals is $75 per day in domestic cities.

## Parking

Staff park in the north garage next to the main entrance. Visitors register their cars at the front desk.
"""
# The hash embedder's cosines are overlaps, far below MiniLM's: the gate's vector floor is lowered,
# and the topic is judged by the words alone (no hash cosine reaches 1).
ANSWER = {"min_vector_score": 0.0, "strong_vector_score": 0.9, "confirm": True, "reader": "fake", "topic_vector": 1.0}


@pytest.fixture
def service(make_runtime, tmp_path: Path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "office.md").write_text(HANDBOOK)
    runtime = make_runtime(answer=ANSWER)
    runtime.ingestor().ingest("t", discover([corpus]), AclSpec.from_groups(["staff"]))
    return runtime.answer_service


def test_a_confirmed_fact_is_asserted_with_the_sentence_that_states_it(service):
    response = service.ask(STAFF, "What is the per diem for meals in domestic cities?")
    assert response.outcome == ANSWERED and not response.refused
    assert "$75 per day" in response.answer and "[1]" in response.answer
    assert response.citations[0]["heading"].endswith("Per diem")
    assert response.confirmation["confirmed"] and response.confirmation["slot"] == "amount"
    assert response.to_dict()["outcome"] == ANSWERED


def test_the_topic_without_the_asked_fact_is_not_confirmed_with_the_closest_evidence(service):
    response = service.ask(STAFF, "How much does parking in the north garage cost?")
    assert response.outcome == NOT_CONFIRMED and response.refused and response.reason == NOT_CONFIRMED
    assert response.answer.startswith("The documents I can see don't state")
    assert '"Staff park in the north garage next to the main entrance." [1]' in response.answer
    assert "person" in response.answer
    assert "$" not in response.answer  # nothing asserted: no amount from another section
    assert response.citations and response.citations[0]["heading"].endswith("Parking")
    assert not response.confirmation["confirmed"]


def test_nothing_on_topic_is_a_bare_refusal(service):
    response = service.ask(STAFF, "Which kayak models can the sailing club rent for regattas?")
    assert response.outcome == REFUSED and response.reason == "low_coverage" and response.citations == []


@pytest.mark.parametrize("question", ["x" * 10_000, "¿Cuántos días de vacaciones tengo?", "休暇は何日ですか", ""])
def test_bad_questions_are_bounded_and_never_an_error(service, question):
    response = service.ask(STAFF, question)
    assert response.outcome in (ANSWERED, NOT_CONFIRMED, REFUSED)


def test_a_failing_reader_asserts_nothing_and_says_so(service):
    class Broken:
        model_id = "broken"

        def score(self, question, texts):
            raise RuntimeError("model crashed")

    service.reader = Broken()
    response = service.ask(STAFF, "What is the per diem for meals in domestic cities?")
    assert response.outcome == NOT_CONFIRMED and "reader_skipped" in response.degraded


def _source(number: int, text: str, heading: str) -> Source:
    passage = Passage(f"t:d{number}:v1:0000", text, f"d{number}", "Handbook", 1, heading, None, "h.md", 1.0)
    return Source(number, passage, text, len(text.split()))


def test_confirm_needs_the_slot_the_subject_and_the_reader():
    sources = [_source(1, "Lodging is reimbursed at cost. Receipts are required.", "Travel > Lodging"),
               _source(2, "The lodging cap in Denver is $180 per night.", "Travel > Lodging > Denver")]
    question = "What is the lodging cap in Denver?"
    found = confirm(FakeReader(), question, sources)
    assert found.confirmed and found.best.source_number == 2 and found.slot.kind == "amount"
    assert not confirm(FakeReader(), question, sources[:1]).confirmed  # on topic, no amount
    strict = confirm(FakeReader(), question, sources, ConfirmSettings(min_probability=0.99))
    assert not strict.confirmed and strict.best is not None  # the closest is still offered


def test_the_not_confirmed_reply_quotes_the_closest_and_names_the_others():
    sources = [_source(1, "Lodging is reimbursed at cost.", "Lodging")]
    closest = confirm(FakeReader(), "What is the lodging cap in Denver?", sources).best
    reply = not_confirmed_reply(asked_slot("What is the lodging cap in Denver?"), closest, [1, 2, 3])
    assert '"Lodging is reimbursed at cost." [1]' in reply and "Related: [2] [3]." in reply


def test_the_extractive_generator_quotes_what_the_reader_scores_highest():
    sources = [_source(1, "Lodging rules changed in 2024. Hotels near the office are preferred.", "Lodging"),
               _source(2, "The lodging cap in Denver is $180 per night.", "Denver")]
    text = ExtractiveGenerator(reader=FakeReader()).generate("What is the lodging cap in Denver?", sources)
    assert text.startswith("The lodging cap in Denver is $180 per night. [2]")
