"""The Reader suite (citadel/reader/base.py): does this text state the answer to this question?

The contract the answer path relies on: one probability in [0, 1] per text, in order; [] for no
texts; the same scores for the same input; any question (very long, empty, non-Latin scripts) scored
without raising; more than MAX_TEXTS texts is a ReaderError; and a text that states the answer scores
above an unrelated one on plain, unambiguous cases.
"""

from __future__ import annotations

import pytest

from citadel.reader.base import MAX_TEXTS, Reader, ReaderError

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


class ReaderConformance:
    """Override `backend` (class-scoped) with the reader under test."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls) -> Reader:
        raise NotImplementedError("a conformance subclass provides the reader under test")

    def test_implements_protocol(self, backend):
        assert isinstance(backend, Reader)
        assert isinstance(backend.model_id, str) and backend.model_id

    def test_one_probability_per_text_in_order(self, backend):
        scores = backend.score(QUESTION, TEXTS)
        assert len(scores) == len(TEXTS)
        assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)
        reversed_scores = backend.score(QUESTION, list(reversed(TEXTS)))
        assert reversed_scores == pytest.approx(list(reversed(scores)), abs=1e-6)

    def test_no_texts_gives_empty_list(self, backend):
        assert backend.score(QUESTION, []) == []

    def test_deterministic(self, backend):
        assert backend.score(QUESTION, TEXTS) == backend.score(QUESTION, TEXTS)

    @pytest.mark.parametrize("question", list(ODD_QUESTIONS.values()), ids=list(ODD_QUESTIONS))
    def test_any_question_is_scored(self, backend, question):
        scores = backend.score(question, [ANSWER, UNRELATED])
        assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)

    def test_more_than_max_texts_raises(self, backend):
        with pytest.raises(ReaderError):
            backend.score(QUESTION, [UNRELATED] * (MAX_TEXTS + 1))

    @pytest.mark.parametrize("question, answer, unrelated", TRIPLES, ids=["leave", "travel", "per_diem"])
    def test_answering_text_scores_higher(self, backend, question, answer, unrelated):
        stated, other = backend.score(question, [answer, unrelated])
        assert stated > other
