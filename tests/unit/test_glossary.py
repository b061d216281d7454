"""The tenant's own acronyms: mined from its definitions, they expand the question
and count for coverage in either spelling."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from citadel import regex
from citadel.answer import glossary as glossary_module
from citadel.answer.glossary import (EMPTY_GLOSSARY, MAX_ADDITIONS, Glossary, acronym_key, definitions,
                                     glossary_of, initials_cost, mine_glossary)
from citadel.text import term_set

HANDBOOK = Path("/work/shared/data/corpora/18f-handbook")


def mined(*texts: str) -> dict[str, str]:
    return dict(mine_glossary(texts).long_forms)


# --- mining ---------------------------------------------------------------------------------------


def test_long_form_before_the_acronym():
    assert mined("Book your Temporary Duty Travel (TDY) in Concur.") == {"tdy": "Temporary Duty Travel"}
    assert mined("Employees accrue paid time off (PTO) every pay period.") == {"pto": "paid time off"}


def test_acronym_before_the_long_form():
    assert mined("Ask your COR (Contracting Officer's Representative) first.") == {
        "cor": "Contracting Officer's Representative"}
    assert mined("The CTO (Chief Technology Officer) approves it.") == {"cto": "Chief Technology Officer"}


def test_long_form_is_the_shortest_run_before_the_parenthesis():
    assert mined("All new hires receive Government Furnished Equipment (GFE) on day one.") == {
        "gfe": "Government Furnished Equipment"}
    assert mined("Talk to the Office of Personnel Management (OPM) about it.") == {
        "opm": "Office of Personnel Management"}


def test_acronym_before_long_form_takes_its_shortest_matching_prefix():
    assert mined("Sign by the NTE (Not To Exceed date) on the form.") == {"nte": "Not To Exceed"}


@pytest.mark.parametrize("text, acronym, long_form", [
    ("a Personal Identity Verification (PIV) card", "piv", "Personal Identity Verification"),
    ("your Contracting Officer (CO) decides", "co", "Contracting Officer"),
    ("in Fiscal Year (FY) planning", "fy", "Fiscal Year"),
    ("under the Digital Millennium Copyright Act (DMCA) we", "dmca", "Digital Millennium Copyright Act"),
    ("the General Data Protection Regulation (GDPR) applies", "gdpr", "General Data Protection Regulation"),
    ("at the Department of Defense (DoD) offices", "dod", "Department of Defense"),
    ("apply for Leave Without Pay (LWOP) when", "lwop", "Leave Without Pay"),
    ("GSA's Online University (OLU) hosts", "olu", "Online University"),
    ("use multi-factor authentication (MFA) always", "mfa", "multi-factor authentication"),
    ("by the **Temporary Duty Travel** (TDY) rules", "tdy", "Temporary Duty Travel"),
    ("the White House Office\nof Science and Technology Policy (OSTP), and", "ostp",
     "Office of Science and Technology Policy"),
])
def test_initials_with_small_words_a_two_letter_word_and_markup(text, acronym, long_form):
    assert mined(text) == {acronym: long_form}


@pytest.mark.parametrize("text", [
    "We will schedule the meeting (TBD) later.",
    "Details are in the appendix (see below).",
    "Weekly 1:1 (one on one) meetings.",
    "TBD (see below)",
    "Our team moved to Colorado (CO) last year.",       # one word giving two letters is a guess
    "GSA employee (Regular)",                            # not an acronym
    "ETS (Concur)",                                      # no initials in common
    "Compensatory (Comp)",                               # one capital is a word, not an acronym
    "In the plan (AB)(AB)(AB) and (ABC)",
])
def test_non_definitions_are_rejected(text):
    assert mined(text) == {}


def test_a_definition_never_spans_a_sentence_or_paragraph():
    assert mined("Temporary staff. Duty Yearly (TDY)") == {}
    assert mined("Temporary\n\nDuty Yearly (TDY)") == {}


def test_plural_acronyms_key_the_singular():
    assert mined("Draft the Statements of Work (SOWs) early.") == {"sow": "Statements of Work"}
    assert mined("All CORs (Contracting Officer Representatives) attend.") == {
        "cor": "Contracting Officer Representatives"}


def test_acronym_key_rules():
    assert acronym_key("TDY") == "tdy"
    assert acronym_key("DoD") == "dod"
    assert acronym_key("SOWs") == "sow"
    assert acronym_key("2FA") == "2fa"
    assert acronym_key("Comp") is None
    assert acronym_key("InSite") is None
    assert acronym_key("A") is None
    assert acronym_key("ABCDEFGHI") is None


def test_initials_cost_prefers_the_plainest_reading():
    assert initials_cost("pto", ["Paid", "Time", "Off"]) == (0, 0)
    assert initials_cost("sow", ["Statement", "of", "Work"]) == (0, 0)
    assert initials_cost("lwop", ["Leave", "Without", "Pay"]) == (0, 1)
    assert initials_cost("tdy", ["Temporary", "Duty", "Travel"]) == (1, 1)
    assert initials_cost("tbd", ["the", "meeting"]) is None
    assert initials_cost("abcd", ["Alpha", "Bravo", "Charlie"]) is None
    # Only one word may give two letters.
    assert initials_cost("abcd", ["Abc", "Cd"]) is None


def test_most_frequent_long_form_wins_and_ties_go_to_the_first_seen():
    texts = ["Check Paid Time Off (PTO).", "PTO (Personal Time Off) rules.", "Paid Time Off (PTO) again.",
             "Also paid time-off (PTO)."]
    assert mined(*texts) == {"pto": "Paid Time Off"}  # "Paid Time Off" twice, case-insensitively
    assert mined("Chief Officer (CO) here.", "Contracting Officer (CO) there.") == {"co": "Chief Officer"}
    assert mined("Contracting Officer (CO) there.", "Chief Officer (CO) here.") == {"co": "Contracting Officer"}


def test_entries_are_capped_keeping_the_most_frequent():
    texts = ["Alpha Bravo (AB).", "Charlie Delta (CD).", "Charlie Delta (CD).", "Echo Foxtrot (EF)."]
    assert mined(*texts) == {"ab": "Alpha Bravo", "cd": "Charlie Delta", "ef": "Echo Foxtrot"}
    assert dict(mine_glossary(texts, max_entries=2).long_forms) == {"cd": "Charlie Delta", "ab": "Alpha Bravo"}


def test_acronyms_that_are_ordinary_words_are_marked_case_sensitive():
    glossary = mine_glossary(["Information Technology (IT) helps.", "Corrective Action Plan (CAP) due.",
                              "Wear a cap outside.", "Put a cap on spending."])
    assert glossary.case_sensitive == frozenset({"it", "cap"})
    assert glossary.expand("Can it help me?") == "Can it help me?"
    assert glossary.expand("Can IT help me?") == "Can IT help me? (Information Technology)"
    # A passage's lower-case "cap" is not read as the acronym.
    assert glossary.augment({"cap"}) == {"cap"}


def test_host_names_are_not_ordinary_words():
    glossary = mine_glossary(["Office of Personnel Management (OPM) rules at www.opm.gov and https://opm.gov/x."])
    assert glossary.case_sensitive == frozenset()


# --- expand ---------------------------------------------------------------------------------------

GLOSSARY = Glossary({"pto": "paid time off", "tdy": "Temporary Duty Travel",
                     "cor": "Contracting Officer's Representative"})


def test_expand_appends_the_long_form_of_an_acronym_in_any_case():
    assert GLOSSARY.expand("How much PTO do I get?") == "How much PTO do I get? (paid time off)"
    assert GLOSSARY.expand("how much pto do i get") == "how much pto do i get (paid time off)"
    assert GLOSSARY.expand("Can I roll over PTOs?") == "Can I roll over PTOs? (paid time off)"


def test_expand_appends_the_acronym_of_a_spelled_long_form():
    assert GLOSSARY.expand("Who books temporary duty travel?") == "Who books temporary duty travel? (TDY)"
    assert GLOSSARY.expand("Does Paid Time-Off roll over?") == "Does Paid Time-Off roll over? (PTO)"
    assert GLOSSARY.expand("Is my time off paid?") == "Is my time off paid?"


def test_expand_whole_words_only_and_once():
    assert GLOSSARY.expand("Is the PTOX portal down?") == "Is the PTOX portal down?"
    assert GLOSSARY.expand("Is the captor here?") == "Is the captor here?"
    assert GLOSSARY.expand("PTO and more PTO?") == "PTO and more PTO? (paid time off)"
    # Both spellings already present: nothing to add.
    assert GLOSSARY.expand("Is paid time off (PTO) capped?") == "Is paid time off (PTO) capped?"


def test_expand_both_directions_in_one_question():
    assert GLOSSARY.expand("Can my COR approve temporary duty travel?") == (
        "Can my COR approve temporary duty travel? (Contracting Officer's Representative) (TDY)")


def test_expand_is_bounded():
    letters = "abcdefghijkl"
    glossary = Glossary({f"x{letter}": f"Xray {letter}word" for letter in letters})
    question = " ".join(f"X{letter.upper()}" for letter in letters)
    expanded = glossary.expand(question)
    assert expanded.count("(") == MAX_ADDITIONS
    assert expanded.startswith(question + " (Xray aword)")


def test_expand_unchanged_without_glossary_or_match():
    assert EMPTY_GLOSSARY.expand("How much PTO do I get?") == "How much PTO do I get?"
    assert GLOSSARY.expand("Where is the office?") == "Where is the office?"
    assert GLOSSARY.expand("") == ""


# --- augment --------------------------------------------------------------------------------------


def test_augment_adds_the_long_form_for_an_acronym():
    terms = term_set("Request PTO in Workday.")
    assert GLOSSARY.augment(terms) == terms | term_set("paid time off")


def test_augment_adds_the_acronym_only_for_a_whole_long_form():
    terms = term_set("Employees accrue paid time off each pay period.")
    assert "pto" in GLOSSARY.augment(terms)
    assert "pto" not in GLOSSARY.augment(term_set("Employees are paid for overtime."))


def test_augment_lets_coverage_count_either_spelling():
    question = GLOSSARY.augment(term_set("How much PTO do I get?"))
    passage = GLOSSARY.augment(term_set("Full-time employees earn paid time off every pay period."))
    assert term_set("How much PTO do I get?") <= passage
    assert term_set("paid time off") <= question


def test_augment_does_not_change_its_input():
    terms = {"pto"}
    GLOSSARY.augment(terms)
    assert terms == {"pto"}
    assert EMPTY_GLOSSARY.augment(terms) == {"pto"}
    assert EMPTY_GLOSSARY.augment(terms) is not terms


# --- per segment ----------------------------------------------------------------------------------


@dataclass
class FakePartition:
    segment_id: str
    table: pa.Table


def partition(segment_id: str, *texts: str) -> FakePartition:
    return FakePartition(segment_id, pa.table({"text": list(texts)}))


def test_glossary_of_is_cached_by_segment_id(monkeypatch):
    calls = []
    real = glossary_module.mine_glossary
    monkeypatch.setattr(glossary_module, "mine_glossary", lambda texts: calls.append(1) or real(texts))
    first = partition("segment-glossary-a", "Paid Time Off (PTO) accrues.", "")
    assert dict(glossary_of(first).long_forms) == {"pto": "Paid Time Off"}
    assert glossary_of(partition("segment-glossary-a", "ignored: same immutable segment")) is glossary_of(first)
    assert len(calls) == 1
    republished = partition("segment-glossary-b", "Temporary Duty Travel (TDY) rules.")
    assert dict(glossary_of(republished).long_forms) == {"tdy": "Temporary Duty Travel"}
    assert len(calls) == 2


def test_huge_partitions_are_sampled(monkeypatch):
    monkeypatch.setattr(glossary_module, "GLOSSARY_SAMPLE_ROWS", 10)
    texts = ["Paid Time Off (PTO)."] * 100
    glossary = glossary_of(partition("segment-glossary-sampled", *texts))
    assert dict(glossary.long_forms) == {"pto": "Paid Time Off"}


# --- linear time ----------------------------------------------------------------------------------


def test_patterns_are_registered_linear_time_patterns():
    names = {name for name in regex.registered() if name.startswith("answer.glossary.")}
    assert names == {"answer.glossary.acronym_in_parentheses", "answer.glossary.acronym_then_parentheses",
                     "answer.glossary.token"}


ADVERSARIAL_LENGTH = 200_000


def fit(piece: str) -> str:
    return (piece * (ADVERSARIAL_LENGTH // len(piece) + 1))[:ADVERSARIAL_LENGTH]


@pytest.mark.parametrize("piece, limit_s", [
    ("(", 1.0), ("A (", 1.0), ("AB (", 1.0), ("(AB ", 1.0), ("\n", 1.0),
    # Packed candidates, each read in full: still linear, a larger constant (about 0.5 s here).
    ("(AB)", 2.5), ("AB (AB) ", 2.5), ("of " * 18 + "(OOOOOOOO) ", 2.5),
    ("Ab Bc Cd De Ef Fg Gh Hi (ABCDEFGH) ", 2.5),
    ("OOOOOOOO (" + "oo " * 30 + ") ", 2.5),
])
def test_mining_is_linear_on_adversarial_text(piece, limit_s):
    text = fit(piece)
    start = time.perf_counter()
    mine_glossary([text])
    assert time.perf_counter() - start < limit_s


def test_expand_and_augment_are_fast_on_a_long_question():
    glossary = Glossary({f"a{i}b": f"Alpha {i} Bravo" for i in range(5000)})
    question = fit("A1B alpha 1 bravo (((( ")[:2000]
    start = time.perf_counter()
    glossary.expand(question)
    glossary.augment(term_set(fit("alpha bravo A7B ")))
    assert time.perf_counter() - start < 1.0


# --- the real handbook ----------------------------------------------------------------------------


def test_the_18f_handbook_defines_tdy():
    if not HANDBOOK.is_dir():
        pytest.skip(f"corpus not present: {HANDBOOK}")
    texts = [path.read_text(encoding="utf-8", errors="replace") for path in sorted(HANDBOOK.rglob("*.md"))]
    glossary = mine_glossary(texts)
    assert "Temporary Duty" in glossary.long_forms["tdy"]
    assert glossary.long_forms["pii"].lower() == "personally identifiable information"
    assert "TDY" in glossary.expand("Who approves temporary duty travel?")
    assert len(glossary.long_forms) >= 50
