"""Signals without labels over HTTP: a rephrase within two minutes is counted in
GET /metrics and marked in the answer log, a new topic and another user's question are not; votes are
counted by reason; every answer's best score and verdicts are counted. The clock is moved, never slept."""

from __future__ import annotations

import re
import time

import pytest

from tests.integration.test_api import client_for
from tests.settable_clock import SettableClock

HOTEL = "What is the hotel limit per night in London?"
HOTEL_AGAIN = "In London, what is the hotel limit per night?"
NEW_TOPIC = "How many vacation days do new employees get?"


@pytest.fixture
def clock():
    return SettableClock(time.time())


@pytest.fixture
def client(home, clock):
    with client_for(home, clock=clock) as c:
        yield c


def metric(client, home, name: str, **labels) -> float:
    """A sample's value in GET /metrics (0 when the series does not exist yet)."""
    text = client.get("/metrics", headers=home.metrics_headers()).text
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    match = re.search(rf"^{name}{{{re.escape(wanted)}}} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def ask(client, home, clock, question: str, user: str = "alice") -> dict:
    response = client.post("/v1/answer", json={"question": question}, headers=home.headers(user=user, now=clock.now))
    assert response.status_code == 200, response.text
    return response.json()


def test_a_rephrase_within_two_minutes_counts_and_a_new_topic_or_another_user_does_not(client, home, clock):
    rephrases = lambda: metric(client, home, "citadel_rephrase_total", tenant="acme")  # noqa: E731
    first = ask(client, home, clock, HOTEL)
    assert rephrases() == 0
    clock.now += 90  # within two minutes, in other words
    second = ask(client, home, clock, HOTEL_AGAIN)
    assert rephrases() == 1
    clock.now += 20
    ask(client, home, clock, NEW_TOPIC)
    assert rephrases() == 1, "a new topic is not a rephrase"
    ask(client, home, clock, HOTEL_AGAIN, user="bob")  # another user's question (served from the cache)
    assert rephrases() == 1, "another user's same question is not a rephrase"
    clock.now += 121
    ask(client, home, clock, HOTEL, user="bob")
    assert rephrases() == 1, "after the window, asking again is not a rephrase"
    assert metric(client, home, "citadel_questions_total", tenant="acme") == 5

    log = {row["request_id"]: row["response"] for row in client.app.state.services.wiring.catalog.answer_log("acme")}
    assert log[second["request_id"]]["rephrase_of"] == first["request_id"], "the answer that did not help is named"
    assert "rephrase_of" not in log[first["request_id"]]


def test_a_rephrase_between_two_cache_hits_counts(client, home, clock):
    ask(client, home, clock, HOTEL)
    ask(client, home, clock, HOTEL_AGAIN)
    clock.now += 300  # alice's questions are forgotten; bob's two are both cache hits
    assert ask(client, home, clock, HOTEL, user="bob")["cached"]
    clock.now += 30
    assert ask(client, home, clock, HOTEL_AGAIN, user="bob")["cached"]
    assert metric(client, home, "citadel_rephrase_total", tenant="acme") == 2


def test_votes_best_scores_and_verdicts_are_counted(client, home, clock):
    answer = ask(client, home, clock, HOTEL)
    for vote, reason in (("down", "outdated"), ("down", "outdated"), ("up", None)):
        response = client.post(f"/v1/answers/{answer['request_id']}/feedback", json={"vote": vote, "reason": reason},
                               headers=home.headers(now=clock.now))
        assert response.status_code == 200, response.text
    assert metric(client, home, "citadel_feedback_total", tenant="acme", vote="down", reason="outdated") == 2
    assert metric(client, home, "citadel_feedback_total", tenant="acme", vote="up", reason="none") == 1
    assert metric(client, home, "citadel_scored_answers_total", tenant="acme") == 1
    logged = client.app.state.services.wiring.catalog.answer_log("acme")[-1]["response"]
    kept = logged["verification"]["kept"]
    assert kept > 0 and metric(client, home, "citadel_verifier_claims_total", verdict="kept") == kept
