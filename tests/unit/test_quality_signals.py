"""Signals without labels (citadel/quality/signals.py): the rephrase detector's window, similarity and
memory bound, and the signals read from an answer-log entry."""

from __future__ import annotations

import numpy as np
import pytest

from citadel.embedding.fake import HashEmbedder
from citadel.quality.signals import AnswerSignals, QualitySignals, RephraseDetector, entry_signals
from tests.settable_clock import SettableClock

HOTEL = "What is the hotel limit per night in London?"
HOTEL_AGAIN = "In London, what is the hotel limit per night?"
NEW_TOPIC = "How many vacation days do new employees get?"


class CountingEmbedder:
    """The hash embedder, counting the texts it embeds."""

    def __init__(self):
        self.inner = HashEmbedder()
        self.texts: list[str] = []

    def __call__(self, text: str) -> np.ndarray:
        self.texts.append(text)
        return self.inner.embed_queries([text])[0]


@pytest.fixture
def clock():
    return SettableClock(1_000.0)


def detector(clock, embed=None, **options) -> RephraseDetector:
    return RephraseDetector(embed or CountingEmbedder(), clock=clock, **{"min_similarity": 0.55, **options})


def test_a_similar_question_within_the_window_rephrases_the_previous_one(clock):
    rephrases = detector(clock)
    assert rephrases.observe("acme", "alice", "r1", HOTEL) is None
    clock.now += 90
    assert rephrases.observe("acme", "alice", "r2", HOTEL_AGAIN) == "r1"
    clock.now += 30
    assert rephrases.observe("acme", "alice", "r3", NEW_TOPIC) is None, "a new topic is not a rephrase"


def test_the_window_expires(clock):
    rephrases = detector(clock, window_s=120)
    rephrases.observe("acme", "alice", "r1", HOTEL)
    clock.now += 121
    assert rephrases.observe("acme", "alice", "r2", HOTEL_AGAIN) is None
    assert len(rephrases) == 1, "the expired question was forgotten, only the new one is kept"


def test_only_the_same_user_of_the_same_tenant_counts(clock):
    rephrases = detector(clock)
    rephrases.observe("acme", "alice", "r1", HOTEL)
    assert rephrases.observe("acme", "bob", "r2", HOTEL_AGAIN) is None
    assert rephrases.observe("globex", "alice", "r3", HOTEL_AGAIN) is None


def test_the_same_words_again_are_a_retry_not_a_rephrase(clock):
    rephrases = detector(clock)
    rephrases.observe("acme", "alice", "r1", HOTEL)
    assert rephrases.observe("acme", "alice", "r2", "  what is the HOTEL limit per night in london? ") is None


def test_memory_is_bounded_by_users_least_recent_first(clock):
    rephrases = detector(clock, max_users=2)
    rephrases.observe("acme", "alice", "r1", HOTEL)
    rephrases.observe("acme", "bob", "r2", HOTEL)
    rephrases.observe("acme", "carol", "r3", HOTEL)  # alice, the least recent, is forgotten
    assert len(rephrases) == 2
    assert rephrases.observe("acme", "alice", "r4", HOTEL_AGAIN) is None
    assert rephrases.observe("acme", "carol", "r5", HOTEL_AGAIN) == "r3"


def test_a_known_vector_is_reused_and_a_lone_question_is_never_embedded(clock):
    embed = CountingEmbedder()
    rephrases = detector(clock, embed)
    vector = HashEmbedder().embed_queries([HOTEL])[0]
    rephrases.observe("acme", "alice", "r1", HOTEL, vector)
    rephrases.observe("acme", "bob", "r2", HOTEL)  # nothing to compare with: not embedded
    assert embed.texts == []
    assert rephrases.observe("acme", "alice", "r3", HOTEL_AGAIN) == "r1"
    assert embed.texts == [HOTEL_AGAIN], "only the new question was embedded; the first one's vector was kept"


def test_a_failing_embedder_costs_the_signal_only(clock):
    def down(text):
        raise ConnectionError("embedder down")

    rephrases = detector(clock, down)
    rephrases.observe("acme", "alice", "r1", HOTEL)
    assert rephrases.observe("acme", "alice", "r2", HOTEL_AGAIN) is None


def test_a_window_of_zero_turns_the_check_off(clock):
    rephrases = detector(clock, window_s=0)
    rephrases.observe("acme", "alice", "r1", HOTEL)
    assert rephrases.observe("acme", "alice", "r2", HOTEL_AGAIN) is None
    assert len(rephrases) == 0


def test_an_entry_gives_its_verdicts_and_best_score():
    entry = {"gate": {"vector_score": 0.21}, "verification": {"claims": 4, "kept": 2, "removed": 1, "corrected": 1}}
    assert entry_signals("acme", entry, low_best_score=0.35) == AnswerSignals(
        "acme", None, {"kept": 2, "removed": 1, "corrected": 1}, 0.21, True)
    scored_high = entry_signals("acme", {"gate": {"vector_score": 0.6}}, low_best_score=0.35)
    assert (scored_high.best_score, scored_high.low_best_score, scored_high.verdicts) == (0.6, False, {})
    unscored = entry_signals("acme", {"gate": {"vector_score": None}}, 0.35)
    assert (unscored.best_score, unscored.low_best_score) == (None, False)


def test_quality_signals_mark_the_entry_and_tell_listeners(clock):
    heard: list[AnswerSignals] = []
    signals = QualitySignals(detector(clock), low_best_score=0.35)
    signals.add_listener(heard.append)
    assert signals.observe("acme", "alice", "r1", HOTEL, {"gate": {"vector_score": 0.3}}) == {}
    assert signals.observe("acme", "alice", "r2", HOTEL_AGAIN, {}) == {"rephrase_of": "r1"}
    assert [(s.rephrase_of, s.low_best_score) for s in heard] == [(None, True), ("r1", False)]


def test_a_failing_listener_never_fails_the_answer(clock):
    def broken(signals):
        raise RuntimeError("metrics gone")

    signals = QualitySignals(detector(clock), low_best_score=0.35)
    signals.add_listener(broken)
    signals.observe("acme", "alice", "r1", HOTEL, {})
    assert signals.observe("acme", "alice", "r2", HOTEL_AGAIN, {}) == {"rephrase_of": "r1"}


def test_the_metrics_count_signals_and_votes_with_bounded_labels():
    from serving.services.metrics import ApiMetrics, TenantLabels

    metrics = ApiMetrics(TenantLabels(max_tenants=1))
    metrics.answer_signals(AnswerSignals("acme", "r1", {"kept": 3, "removed": 1, "corrected": 0}, 0.2, True))
    metrics.answer_signals(AnswerSignals("acme", None, {}, 0.6, False))
    metrics.answer_signals(AnswerSignals("globex", "r7"))  # a second tenant over the bound: "other"
    for vote, reason in (("down", "outdated"), ("down", "outdated"), ("down", None), ("up", None)):
        metrics.feedback_recorded("acme", vote, reason)
    exposed = metrics.render().decode()
    for sample in ('citadel_questions_total{tenant="acme"} 2.0', 'citadel_rephrase_total{tenant="acme"} 1.0',
                   'citadel_rephrase_total{tenant="other"} 1.0', 'citadel_verifier_claims_total{verdict="kept"} 3.0',
                   'citadel_verifier_claims_total{verdict="removed"} 1.0',
                   'citadel_scored_answers_total{tenant="acme"} 2.0', 'citadel_low_best_score_total{tenant="acme"} 1.0',
                   'citadel_feedback_total{reason="outdated",tenant="acme",vote="down"} 2.0',
                   'citadel_feedback_total{reason="none",tenant="acme",vote="down"} 1.0',
                   'citadel_feedback_total{reason="none",tenant="acme",vote="up"} 1.0'):
        assert sample in exposed, sample
    assert 'verdict="corrected"' not in exposed, "a zero count adds no series"
    assert 'citadel_scored_answers_total{tenant="other"}' not in exposed, "an unscored answer is not in the denominator"
