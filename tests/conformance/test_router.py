"""Every QuestionRouter runs the router suite (tests/conformance/suites/router.py): the production
Router (rules plus the packaged TF-IDF injection classifier, ~0.5 s to load), the same without the
off-topic rule and AllowAllRouter (the fake the answer service uses when it is given no router); the
router runs in the gateway's process in both topologies, so no proxy to it exists. RouteDecision
itself refuses to be built inconsistent, so a wrong router fails where it is wrong.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from citadel.guardrails.base import RouteDecision
from citadel.guardrails.router import AllowAllRouter, Router
from tests.conformance.suites.router import RouterConformance


class TestRouter(RouterConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return Router()


class TestRouterWithoutOffTopic(RouterConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return Router(detect_off_topic=False)


class TestAllowAllRouter(RouterConformance):
    guards = False

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return AllowAllRouter()


# -- the decision type ------------------------------------------------------------------------


@pytest.mark.parametrize("fields", [
    {"action": "refuse", "reason": "x"},  # no reply
    {"action": "refuse", "reply": "no"},  # no reason
    {"action": "refuse", "reason": "x", "reply": "no", "path": "simple"},
    {"action": "answer"},  # no path
    {"action": "answer", "path": "sideways"},
    {"action": "answer", "path": "simple", "reason": "x"},
    {"action": "answer", "path": "simple", "reply": "hello"},
    {"action": "maybe", "path": "simple"},
])
def test_an_inconsistent_decision_cannot_be_built(fields):
    with pytest.raises(ValueError):
        RouteDecision(**fields)


def test_decision_constructors_and_immutability():
    answer = RouteDecision.answer("multi_step")
    assert (answer.action, answer.path, answer.refused) == ("answer", "multi_step", False)
    refusal = RouteDecision.refuse("off_topic", "Please ask about your documents.", detail="rule")
    assert (refusal.action, refusal.reason, refusal.reply, refusal.detail, refusal.refused) == (
        "refuse", "off_topic", "Please ask about your documents.", "rule", True)
    with pytest.raises(FrozenInstanceError):
        refusal.reason = "other"  # type: ignore[misc]
    assert len({answer, refusal, RouteDecision.answer("multi_step")}) == 2, "hashable, equal by value"
