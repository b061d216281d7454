"""A user's request for an action, read from their own message (citadel/tools/intents.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from citadel.tools.intents import IntentMatcher, subject_id
from citadel.tools.spec import InvalidToolSpec, load_tool_specs, parse_tool_specs

CRM_TOOLS = Path(__file__).resolve().parents[2] / "examples" / "crm" / "tools.yaml"


@pytest.fixture(scope="module")
def specs():
    return load_tool_specs(CRM_TOOLS)


def test_the_running_example_request_becomes_the_tools_arguments(specs):
    message = "Acme renews next month. Are they eligible for the multi-year discount? Propose 12% for 24 months."
    [action] = IntentMatcher(specs.values()).find(message, "Acme", specs)
    assert action.tool == "crm.create_discount_approval"
    assert action.args == {"discount_pct": 12, "term_months": 24, "account_id": "acme"}
    assert action.ask(message) == "Propose 12% for 24 months"


def test_a_named_account_wins_over_the_subject_and_is_named_as_the_crm_names_it(specs):
    [action] = IntentMatcher(specs.values()).find("Please propose a 7.5% discount for 36 months to Globex.", "Acme",
                                                  specs)
    assert action.args == {"discount_pct": 7.5, "term_months": 36, "account_id": "globex"}
    assert subject_id("Acme Corp & Co") == "acme-corp-co"


def test_no_request_without_the_tool_allowed_or_with_arguments_the_schema_refuses(specs):
    matcher = IntentMatcher(specs.values())
    assert matcher.find("Propose 12% for 24 months.", "Acme", ["search"]) == []

    def refuse(name, args):
        raise ValueError("term too long")

    assert matcher.find("Propose 12% for 24 months.", "Acme", specs, refuse) == []
    assert matcher.find("What is the discount for 24 months?", "Acme", specs) == []


INTENT_TOOL = """
tools:
  - name: crm.thing
    description: A thing.
    risk_tier: T0
    args_schema:
      type: object
      additionalProperties: false
      required: [account_id, size]
      properties:
        account_id: {{type: string}}
        size: {{type: integer}}
    intent: {intent}
"""


@pytest.mark.parametrize("intent, problem", [
    ("{pattern: 'make (?P<colour>\\w+)', subject_arg: account_id}", "colour"),
    ("{pattern: 'make (?P<size>\\d+)'}", "account_id"),
    ("{pattern: '(a)\\1', subject_arg: account_id}", "RE2"),
])
def test_an_intent_that_cannot_fill_the_tool_or_run_in_linear_time_is_refused_at_load(intent, problem):
    with pytest.raises(InvalidToolSpec, match=problem):
        parse_tool_specs(INTENT_TOOL.format(intent=intent))
