"""The decision (citadel/agent/decision.py): an eligibility question's answer opens
with the verdict and the comparisons behind it, computed by code from the numbered sources with each
operand cited — eligible, not eligible with the failing comparison, or the conditional an unsettled
criterion leaves — and never a verdict the sources do not carry. Sources are built by hand: the
Northwind rule's table and the Acme documents' own sentences."""

from __future__ import annotations

from datetime import date

import pytest

from citadel.agent.decision import (CONDITIONAL, ELIGIBLE, NOT_ELIGIBLE, as_of, decide, parse_threshold)
from citadel.answer.validator import AnswerValidator, strip_markers
from citadel.prompting.source import Source
from citadel.quality.verifier import KEPT, ClaimVerifier
from citadel.types import Passage

QUESTION = "Acme renews next month. Are they eligible for the multi-year discount?"
TODAY = date(2026, 11, 2)  # next month is December 2026
TABLE = ("| Criterion | Requirement |\n| --- | --- |\n"
         "| Annual revenue | {revenue} in the last twelve months |\n"
         "| Customer tenure | {tenure} since the start date of the customer's master services agreement |")
GRANT = "Eligible customers receive a multi-year discount of up to 12% on the committed term."
REVENUE = "Acme Corporation's annual revenue with Northwind in the last twelve months was {}."
MSA = "The agreement's start date is {}. The current term ends on 31 December 2026."


def passage(document_id: str, title: str, heading: str, text: str) -> Passage:
    return Passage(f"northwind:{document_id}:v1:{abs(hash(heading)) % 1000:04d}", text, document_id, title, 1,
                   heading, None, f"{document_id}.md", 1.0)


def sources(revenue: str | None = "$740,000", started: str | None = "15 January 2023",
            requirements: tuple[str, str] = ("at least $500,000", "at least 2 years"), rule: bool = True) -> list[Source]:
    """The synthesis's numbered sources: the rule's discount section, its eligibility table, the
    account's revenue and the agreement's term (each left out when None/False)."""
    policy = "Northwind Discount Policy 2026"
    found = [passage("discount-policy-2026", policy, f"{policy} > 3 Multi-year agreements > 3.3 Discount", GRANT)]
    if rule:
        table = TABLE.format(revenue=requirements[0], tenure=requirements[1])
        found.append(passage("discount-policy-2026", policy, f"{policy} > 3 Multi-year agreements > 3.2 Eligibility",
                             f"A customer is eligible only when it meets every criterion below.\n\n{table}"))
    if revenue is not None:
        found.append(passage("acme-account-facts", "Acme Corporation Account Facts",
                             "Acme Corporation Account Facts > Revenue", REVENUE.format(revenue)))
    if started is not None:
        found.append(passage("acme-msa", "Acme Corporation Master Services Agreement",
                             "Acme Corporation Master Services Agreement > Term and renewal", MSA.format(started)))
    return [Source(n, p, p.text, len(p.text.split())) for n, p in enumerate(found, start=1)]


def checked(text: str, computed: str, numbered: list[Source]) -> str:
    """The sentence through the claim verifier and the validator, as the answer service runs them."""
    verifier = ClaimVerifier(today=lambda: TODAY)
    recomputed = verifier.recompute(text, numbered)
    derived = dict(recomputed.computed)
    key = strip_markers(text).lower()
    derived[key] = f"{derived.get(key, '')} {computed}".strip()
    validated = AnswerValidator().validate(QUESTION, recomputed.text, numbered, None, derived)
    result = verifier.verify(validated.text, numbered, recomputed)
    assert [v.action for v in result.verdicts] == [KEPT]
    return result.text


def test_every_criterion_met_is_eligible_with_each_comparison_cited():
    numbered = sources()
    decision = decide(QUESTION, numbered, TODAY)
    assert decision.verdict == ELIGIBLE
    # the first day of next month is the tightest for a tenure bar: it holds on every day after it
    assert decision.text == (
        "Acme is eligible for the multi-year discount of up to 12% [1]: annual revenue $740,000 ≥ $500,000 [3][2]; "
        "customer tenure since 15 January 2023, 3 years 10 months by 1 December 2026 (the renewal next month) "
        "≥ 2 years [4][2].")
    assert checked(decision.text, decision.computed, numbered) == decision.text  # the markers stay where they stand


def test_a_failing_criterion_is_not_eligible_with_the_failing_comparison():
    low = decide(QUESTION, sources(revenue="$400,000"), TODAY)
    assert low.verdict == NOT_ELIGIBLE
    assert low.text == "Acme is not eligible for the multi-year discount: annual revenue $400,000 < $500,000 [3][2]."
    assert checked(low.text, low.computed, sources(revenue="$400,000")) == low.text
    # a tenure too short on every day of next month: the last day is the tightest
    recent = decide(QUESTION, sources(started="15 June 2025"), TODAY)
    assert recent.verdict == NOT_ELIGIBLE and recent.text == (
        "Acme is not eligible for the multi-year discount: customer tenure since 15 June 2025, 1 year 6 months by "
        "31 December 2026 (the renewal next month) < 2 years [4][2].")
    assert checked(recent.text, recent.computed, sources(started="15 June 2025")) == recent.text
    # one failed criterion decides, whatever another leaves open
    assert decide(QUESTION, sources(revenue="$400,000", started=None), TODAY).verdict == NOT_ELIGIBLE


def test_an_unsettled_criterion_gives_the_conditional_not_a_verdict():
    withdrawn = sources(started=None)  # the agreement that gives the start date is not among the sources
    decision = decide(QUESTION, withdrawn, TODAY)
    assert decision.verdict == CONDITIONAL
    assert decision.text == (
        "If Acme's customer tenure began on or before 1 December 2024, 2 years before 1 December 2026 "
        "(the renewal next month) [2], Acme is eligible for the multi-year discount of up to 12% [1]: "
        "annual revenue $740,000 ≥ $500,000 [3][2].")
    assert checked(decision.text, decision.computed, withdrawn) == decision.text
    # the day of next month decides (2 years on 15 December 2026): the conditional says from when
    turning = decide(QUESTION, sources(started="15 December 2024"), TODAY)
    assert turning.verdict == CONDITIONAL and turning.text.startswith(
        "If the renewal next month is on or after 15 December 2026 [4][2], Acme is eligible")
    assert checked(turning.text, turning.computed, sources(started="15 December 2024")) == turning.text
    # nothing settled and nothing met: no sentence at all
    assert decide(QUESTION, sources(revenue=None, started=None), TODAY) is None


def test_an_operand_without_a_citation_gives_no_verdict():
    # the rule's table is not among the numbered sources: its thresholds cannot be cited
    assert decide(QUESTION, sources(rule=False), TODAY) is None
    # the user's own figure is not evidence: the revenue stays unsettled and no verdict is stated
    claimed = "Acme renews next month with revenue of $900,000. Are they eligible for the multi-year discount?"
    decision = decide(claimed, sources(revenue=None), TODAY)
    assert decision.verdict == CONDITIONAL and "$900,000" not in decision.text
    assert decision.text.startswith("If Acme's annual revenue is at least $500,000 [2], Acme is eligible")


@pytest.mark.parametrize("requirement, expected", [
    ("at least $500,000", ("≥", 500_000.0, "$500,000")),
    ("≥ $500,000", ("≥", 500_000.0, "$500,000")),
    ("over 500,000 USD", (">", 500_000.0, "$500,000")),
    ("$1.2 million or more", ("≥", 1_200_000.0, "$1,200,000")),
    ("24 months or longer", ("≥", 24, "24 months")),
    ("at least 2 years", ("≥", 24, "2 years")),
])
def test_thresholds_are_read_as_the_rule_states_them(requirement, expected):
    threshold = parse_threshold(requirement)
    assert (threshold.op, threshold.value, threshold.written) == expected


@pytest.mark.parametrize("requirement", ["at least two years", "a long-standing customer", "between $1 and $2",
                                         "at least $500,000 and at most $2,000,000", "at least $2 years", ""])
def test_a_malformed_threshold_gives_no_decision(requirement):
    assert parse_threshold(requirement) is None
    assert decide(QUESTION, sources(requirements=("at least $500,000", requirement)), TODAY) is None


def test_the_date_asked_about_comes_from_the_question_else_today():
    assert as_of(QUESTION, TODAY) == as_of("Acme renews next month.", TODAY)
    assert (as_of(QUESTION, TODAY).earliest, as_of(QUESTION, TODAY).latest) == (date(2026, 12, 1), date(2026, 12, 31))
    signing = as_of("Acme signs on 15 March 2027. Are they eligible?", TODAY)
    assert (signing.earliest, signing.latest, signing.label) == (date(2027, 3, 15), date(2027, 3, 15), "the signing")
    plain = as_of("Is Acme eligible for the multi-year discount?", TODAY)
    assert (plain.earliest, plain.latest, plain.label) == (TODAY, TODAY, "today")
    decision = decide("Is Acme eligible for the multi-year discount?", sources(), TODAY)
    assert "3 years 9 months by 2 November 2026 (today) ≥ 2 years" in decision.text


def test_a_question_that_asks_no_eligibility_gets_no_decision():
    assert decide("What is the multi-year discount?", sources(), TODAY) is None
