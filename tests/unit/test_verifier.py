"""The claim verifier (citadel/quality/verifier.py, DESIGN.md §11): each claim checked against
the source it cites, derived figures recomputed by code and corrected from the source, unsupported and
uncited claims removed, a failing or slow judge skipped visibly, any answer size bounded."""

from __future__ import annotations

import time
from datetime import date

from citadel.answer.quantities import months_between, spell_duration, start_date
from citadel.answer.validator import AnswerValidator
from citadel.prompting.source import Source
from citadel.quality.verifier import CORRECTED, KEPT, REMOVED, ClaimVerifier, VerifierSettings
from citadel.reader.fake import FakeReader
from citadel.types import Passage

MSA = ("The agreement's start date is 15 January 2023. The current term ends on 31 December 2026 and the "
       "agreement renews on 1 January 2027 for a further term unless either party gives 60 days' notice. "
       "Acme Corporation is the customer.")
FACTS = "Acme's annual revenue with Northwind is $740,000. Hardware came to $500 and support to $750."
POLICY = "Customers need annual revenue of at least $500,000 and at least 2 years as a customer."
TODAY = date(2026, 12, 2)


def source(number: int, text: str, document_id: str = "doc") -> Source:
    passage = Passage(f"t:{document_id}:v1:0000", text, document_id, document_id.title(), 1, "Section", None,
                      f"{document_id}.md", 1.0)
    return Source(number, passage, text, len(text.split()))


SOURCES = [source(1, MSA, "acme-msa"), source(2, FACTS, "acme-facts"), source(3, POLICY, "policy")]


def verifier(judge=None, **settings) -> ClaimVerifier:
    return ClaimVerifier(judge, VerifierSettings(**settings), today=lambda: TODAY)


def run(answer: str, checker: ClaimVerifier, sources=SOURCES):
    """Recompute, validate, verify: the order the answer service runs them in."""
    recomputed = checker.recompute(answer, sources)
    validated = AnswerValidator().validate("question", recomputed.text, sources, None, recomputed.computed)
    return checker.verify(validated.text, sources, recomputed)


class RaisingReader:
    model_id = "down"

    def score(self, question, texts):
        raise RuntimeError("model server down")


class SlowReader:
    model_id = "slow"

    def score(self, question, texts):
        time.sleep(1.0)
        return [0.9 for _ in texts]


def test_durations_are_whole_months_since_the_start():
    assert start_date(MSA) == date(2023, 1, 15)
    assert months_between(date(2023, 1, 15), TODAY) == 46
    assert spell_duration(46) == "3 years 10 months" and spell_duration(12) == "1 year"


def test_the_seeds_wrong_tenure_is_corrected_from_its_source():
    """Every word of "Acme has been a customer for 5 years" is in the record, and the record says the
    agreement started on 15 January 2023: 3 years 10 months before the reference date."""
    result = run("Acme has been a customer for 5 years [1].", verifier(FakeReader()))
    [verdict] = result.verdicts
    assert verdict.action == CORRECTED and verdict.check == "duration"
    assert "3 years 10 months since 15 January 2023" == verdict.computed
    assert result.text == "Acme has been a customer for 3 years 10 months [1]."
    assert not result.judge_skipped


def test_a_right_tenure_is_kept_and_a_rule_is_not_a_derivation():
    result = run("Acme has been a customer for 3 years [1]. Customers need at least 2 years as a customer [3].",
                 verifier(FakeReader()))
    assert [v.action for v in result.verdicts] == [KEPT, KEPT]
    assert result.verdicts[0].check == "duration" and result.verdicts[1].check != "duration"


def test_a_wrong_total_is_corrected_and_a_false_comparison_removed():
    result = run("Hardware at $500 and support at $750 total $1,350 [2]. "
                 "Acme's revenue of $740,000 is less than $500,000 [2][3].", verifier())
    comparison, total = result.verdicts
    assert total.action == CORRECTED and "$1,250" in result.text and "$1,350" not in result.text
    assert comparison.action == REMOVED and comparison.check == "comparison"
    kept = run("Acme's revenue of $740,000 is at least $500,000 [2][3].", verifier())
    assert [v.action for v in kept.verdicts] == [KEPT]


def test_an_unsupported_sentence_is_removed_by_the_judge():
    """Most of its words are in the cited record (the validator's lexical share passes it); the judge
    reads the record's sentences and the record and finds none that states it."""
    answer = "Acme Corporation is the customer [1]. Acme Corporation renews its hardware warranty [1]."
    checker = verifier(FakeReader(), min_probability=0.7)
    result = checker.verify(answer, SOURCES)
    quoted, judged = result.verdicts
    assert quoted.check == "quoted" and quoted.action == KEPT
    assert judged.check == "judged" and judged.action == REMOVED and judged.probability < 0.7
    assert result.text == "Acme Corporation is the customer [1]."


def test_a_claim_with_no_citation_is_removed():
    result = verifier(FakeReader()).verify("Acme Corporation is the customer. Acme is big [7].", SOURCES)
    assert [(v.check, v.action) for v in result.verdicts] == [("no_citation", REMOVED), ("no_citation", REMOVED)]
    assert result.text == ""


def test_a_judge_that_raises_or_is_slow_is_skipped_and_the_answer_kept():
    answer = "The customer gives notice the agreement renews [1]."
    for judge in (RaisingReader(), SlowReader()):
        started = time.perf_counter()
        result = verifier(judge, timeout_s=0.2).verify(answer, SOURCES)
        assert time.perf_counter() - started < 0.9
        assert result.judge_skipped and result.text == answer
        assert [(v.check, v.action) for v in result.verdicts] == [("judge_skipped", KEPT)]


def test_a_10000_word_answer_is_checked_within_its_bound():
    sentence = "The agreement renews on 1 January 2027 for a further term [1]. "
    answer = sentence * (10_000 // len(sentence.split()))
    started = time.perf_counter()
    result = run(answer, verifier(FakeReader(), max_claims=40))
    assert time.perf_counter() - started < 10
    assert len(result.verdicts) <= 40 and result.shortened == 0  # the validator keeps one of the repeats
    varied = " ".join(f"Claim number {i} says the agreement renews [1]." for i in range(1_500))
    result = verifier(FakeReader(), max_claims=40).verify(varied, SOURCES)
    assert len(result.verdicts) == 40 and result.shortened == 1_460
    assert result.text.endswith("(Shortened: 1460 further statements could not be checked and were left out.)")


def test_a_tenure_to_a_stated_date_is_recomputed_to_that_date_and_its_comparison_checked():
    """A decision's clause: the tenure up to the date it names (not the reference date), corrected when
    wrong; a comparison with the rule's duration that does not hold removes the claim, and so does any
    false comparison beside a true one."""
    clause = "Acme's tenure since 15 January 2023, {} by 1 January 2027 {} 2 years [1][3]; revenue $740,000 {} $500,000 [2][3]."
    kept = run(clause.format("3 years 11 months", "≥", "≥"), verifier())
    [verdict] = kept.verdicts
    assert verdict.action == KEPT and verdict.check == "duration+comparison"
    assert verdict.computed.startswith("3 years 11 months from 15 January 2023 to 1 January 2027; ≥ 2 years: true")
    assert kept.text == clause.format("3 years 11 months", "≥", "≥")  # each operand's markers where they stand
    corrected = run(clause.format("3 years 10 months", "≥", "≥"), verifier())
    assert [v.action for v in corrected.verdicts] == [CORRECTED] and "3 years 11 months by" in corrected.text
    for false in (clause.format("3 years 11 months", "<", "≥"), clause.format("3 years 11 months", "≥", "<")):
        assert REMOVED in [v.action for v in run(false, verifier()).verdicts]
