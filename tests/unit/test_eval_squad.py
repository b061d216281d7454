"""The SQuAD 2.0 refusal harness on a tiny synthetic SQuAD-like file (hash embedder, no shared data)."""

from __future__ import annotations

import json

import pytest

from citadel.eval import squad

# The hash embedder's cosines are bag-of-words overlaps, far below MiniLM's: lower the vector floor so
# the gate's coverage rule decides (as in tests/unit/test_answer.py).
HASH_GATE = {"min_vector_score": 0.0, "strong_vector_score": 0.9}

SQUAD = {
    "version": "v2.0",
    "data": [
        {
            "title": "Lighthouse_Keeping",
            "paragraphs": [
                {
                    "context": "The Skerryvore lighthouse was completed in 1844 by the engineer Alan Stevenson. "
                               "Its granite tower stands 48 metres tall on a reef off the Scottish coast.",
                    "qas": [
                        {"id": "q1", "question": "Which engineer completed the Skerryvore lighthouse?",
                         "answers": [{"text": "Alan Stevenson", "answer_start": 60}], "is_impossible": False},
                        {"id": "q2", "question": "How tall is the granite tower of Skerryvore?",
                         "answers": [{"text": "48 metres", "answer_start": 110}], "is_impossible": False},
                        {"id": "q3", "question": "Which saxophonist recorded the jazz album about volcanoes?",
                         "answers": [], "plausible_answers": [{"text": "Alan", "answer_start": 0}],
                         "is_impossible": True},
                    ],
                },
                {
                    "context": "Lighthouse keepers trimmed the lamp wicks every night and logged the weather "
                               "in a daily journal kept at the station.",
                    "qas": [
                        {"id": "q4", "question": "What did lighthouse keepers log in the daily journal?",
                         "answers": [{"text": "the weather", "answer_start": 60}], "is_impossible": False},
                    ],
                },
            ],
        },
        {
            "title": "Sourdough",
            "paragraphs": [
                {
                    "context": "A sourdough starter is a culture of wild yeast and lactobacilli that bakers feed "
                               "with flour and water.",
                    "qas": [
                        {"id": "q5", "question": "What do bakers feed a sourdough starter with?",
                         "answers": [{"text": "flour and water", "answer_start": 80}], "is_impossible": False},
                        {"id": "q6", "question": "Which quarterback threw the longest touchdown pass in playoff history?",
                         "answers": [], "is_impossible": True},
                    ],
                }
            ],
        },
    ],
}


@pytest.fixture
def squad_file(tmp_path):
    path = tmp_path / "tiny-squad.json"
    path.write_text(json.dumps(SQUAD))
    return path


def test_load_and_sample_are_seeded(squad_file):
    data = squad.load_squad(squad_file)
    assert len(data.questions) == 6
    assert sum(q.impossible for q in data.questions) == 2
    assert {q.document_id for q in data.questions} == {"lighthouse_keeping", "sourdough"}
    first = [q.id for q in squad.sample_questions(data, 4, seed=1)]
    assert first == [q.id for q in squad.sample_questions(data, 4, seed=1)]
    assert len(squad.sample_questions(data, 100)) == 6


def test_answer_normalisation_matches_the_official_script():
    assert squad.normalise_answer("The  Weather!") == "weather"
    assert squad.contains_answer("Keepers logged the weather in a journal.", ("the weather",))
    assert not squad.contains_answer("Keepers logged weatherproof boots.", ("the weather",))


def test_summary_arithmetic():
    rows = [
        {"impossible": True, "refused": True, "reason": "low_coverage", "answer_found": False},
        {"impossible": True, "refused": False, "reason": None, "answer_found": False},
        {"impossible": False, "refused": True, "reason": "low_coverage", "answer_found": False},
        {"impossible": False, "refused": False, "reason": None, "answer_found": True},
        {"impossible": False, "refused": False, "reason": None, "answer_found": False},
    ]
    report = squad.summarise(rows)
    assert report["refusal_precision"] == 0.5
    assert report["refusal_recall"] == 0.5
    assert report["refusal_f1"] == 0.5
    assert report["answer_recall"] == round(1 / 3, 4)
    assert report["false_refusals"] == 1
    assert report["refusal_reasons"] == {"low_coverage": 2}


def test_run_end_to_end_on_the_tiny_file(squad_file, make_runtime):
    runtime = make_runtime(answer=HASH_GATE)
    report = squad.run(runtime, squad_file, size=100, tenant="squad-tiny")
    assert report["questions"] == 6 and report["unanswerable"] == 2
    assert report["build"]["documents"] == 2 and report["build"]["failed"] == 0
    # The off-topic unanswerable questions share no distinctive terms with the articles: refused.
    assert report["refusal_recall"] == 1.0
    assert report["answer_recall"] >= 0.75
    again = squad.run(runtime, squad_file, size=100, tenant="squad-tiny")
    assert again["build"]["published"] == 0  # idempotent: nothing re-embedded
    assert "refusal_f1" in squad.format_table(report)
