"""Routing that sees actions: the router's generic action rules, and the run's
path when only a tool's intent names the action."""

from __future__ import annotations

import pytest

from citadel.agent.routing import AGENTIC, REFUSED, SINGLE_SHOT, reported_path, run_path
from citadel.guardrails import topics
from citadel.guardrails.base import RouteDecision
from citadel.guardrails.router import Router


@pytest.mark.parametrize("message", [
    "Propose a 5% discount for 24 months for acme.",
    "Book a hotel in London for next Tuesday.",
    "Can you open a ticket for my broken laptop?",
    "Please raise a discount approval for Initech at 5% for 12 months.",
    "What is the standard discount? Please apply it to Initech's renewal.",
    "Check the 2026 policy and then propose 5% for 24 months for Acme.",
    "Find Acme's renewal date and send a reminder to the account owner.",
    "I want to cancel my flight to Paris.",  # unclear: the agentic path is the safe side
])
def test_a_request_for_an_action_is_multi_step(message):
    assert Router().route(message).path == "multi_step"


def test_the_decision_names_the_action_rule():
    assert Router().route("Propose a 5% discount for 24 months for acme.").detail == "requested_action"


@pytest.mark.parametrize("message", [
    "How do I submit a discount approval?",
    "Can I book business class on a long flight?",
    "Who approves a discount above 15%?",
    "How do I create a strong password?",
    "Where do I send my receipts?",
    "Is a refund possible for a cancelled flight?",
    "What is the order of approvals for travel?",
    "How do I book travel and get reimbursed afterwards?",  # multi-part, but no action
])
def test_a_question_about_acting_is_no_request(message):
    assert topics.action_request(message) is None


def test_a_tool_intent_alone_sends_the_run_to_the_agentic_path():
    simple = RouteDecision.answer("simple")
    assert run_path(simple, lambda: ["crm.create_discount_approval"]) == AGENTIC
    assert run_path(simple, lambda: []) == SINGLE_SHOT


def test_a_refusal_stays_single_shot_and_reads_no_intent():
    refusal = RouteDecision.refuse("off_topic", "no")

    def never():
        raise AssertionError("a refused message is not searched for actions")
    assert run_path(refusal, never) == SINGLE_SHOT and reported_path(refusal, never) == REFUSED
    assert run_path(RouteDecision.answer("multi_step"), never) == AGENTIC
