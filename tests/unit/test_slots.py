"""The asked slot (DESIGN §4 step 6): what kind of fact a question asks for, about what, and whether
a sentence holds a value of that kind."""

from __future__ import annotations

import re
import time

import pytest

from citadel import regex
from citadel.answer import slots
from citadel.answer.slots import (SLOT_KINDS, AskedSlot, asked_slot, describe, holds_slot, slot_values,
                                  subject_share)

# --- asked_slot: the kind ---------------------------------------------------------------------------


@pytest.mark.parametrize("question, kind", [
    # amount
    ("How much does the company pay toward my home internet each month?", "amount"),
    ("What's the per diem for meals when I travel to Chicago?", "amount"),
    ("What's the nightly cap on hotels for a conference trip?", "amount"),
    ("Above what dollar amount do I need a receipt?", "amount"),
    ("Is there a learning budget I can use for books?", "amount"),
    # percentage
    ("What percentage of my salary does the 401k match?", "percentage"),
    ("What share of the health premium does the company cover?", "percentage"),
    # duration
    ("How long is parental leave?", "duration"),
    ("How many vacation days do I get in my first year?", "duration"),
    ("How much sick time can I carry over into next year?", "duration"),
    ("How much notice should I give before I resign?", "duration"),
    ("How far in advance do I have to book flights?", "duration"),
    ("What's the deadline for submitting my expense report?", "duration"),
    ("How often are performance reviews held?", "duration"),
    ("My dad is in hospital. How much of my leave can I use to care for him?", "duration"),
    # date
    ("When is open enrollment for benefits?", "date"),
    ("When can I start using my PTO?", "date"),
    ("On which day of the month is payroll deposited?", "date"),
    # count
    ("How many people can attend the offsite?", "count"),
    ("What's the smallest screen size allowed for a second monitor?", "count"),
    # contact
    ("Who do I contact about a payroll mistake?", "contact"),
    ("What's the email address for the IT help desk?", "contact"),
    ("Where do I send my signed offer letter?", "contact"),
    ("Who has to approve my travel before I book it?", "contact"),
    ("Is there a phone number I can call for benefits questions?", "contact"),
    # list
    ("What are the company holidays this year?", "list"),
    ("Which benefits can part-time staff get?", "list"),
    # yes_no
    ("Can I carry over unused vacation?", "yes_no"),
    ("Do I need my manager's approval to work from another country?", "yes_no"),
    ("If I move to a new state, is my health plan still valid?", "yes_no"),
    ("Am I allowed to bring my dog to the office?", "yes_no"),
    ("Will the company pay for my standing desk?", "yes_no"),
    # open
    ("How do I request time off?", "open"),
    ("What is the dress code for client meetings?", "open"),
    ("What happens to my laptop when I leave, do I return it?", "open"),
    ("Who owns the code I write on weekends?", "open"),
])
def test_kind_of_a_realistic_question(question, kind):
    assert asked_slot(question).kind == kind


def test_the_asking_sentence_decides_not_the_story_before_it():
    # "$200" and the weekdays are in the story; the question is yes/no.
    assert asked_slot("A vendor offered me a gift worth $200 on Monday. Am I allowed to keep it?").kind == "yes_no"
    assert asked_slot("I'd like to spend $500 on a course. How far ahead do I have to ask?").kind == "duration"


def test_how_much_is_resolved_by_its_noun():
    assert asked_slot("How much vacation can I roll over?").kind == "duration"
    assert asked_slot("How much holiday pay do I get on a 10-hour schedule?").kind == "duration"
    assert asked_slot("How much does a parking permit cost?").kind == "amount"
    assert asked_slot("How much does GitHub give me each month for a gym?").kind == "amount"  # "each month" is a rate


def test_precedence_between_cues():
    # "how many hours" (duration) beats "how many" (count); a duration beats a contact cue.
    assert asked_slot("How many hours of training do I need, and who do I ask?").kind == "duration"
    # A percentage beats an amount ("what percent" of a salary).
    assert asked_slot("What percent of my salary is the bonus?").kind == "percentage"
    # A wh-question first makes a later yes/no clause part of it.
    assert asked_slot("How is mileage paid, and can I claim tolls?").kind == "open"
    assert asked_slot("Who signs off on the cost of the trip?").kind == "contact"


def test_polar_form():
    assert asked_slot("Is there a cut-off date for appealing?") == AskedSlot(
        "duration", asked_slot("Is there a cut-off date for appealing?").subject, polar=True,
        clause="Is there a cut-off date for appealing?")
    assert asked_slot("Is there a cut-off date for appealing?").polar
    assert not asked_slot("How long is the appeal window?").polar
    assert asked_slot("Can you tell me how long the appeal window is?").kind == "duration"
    assert not asked_slot("Can you tell me how long the appeal window is?").polar


# --- asked_slot: the subject ------------------------------------------------------------------------


def test_subject_is_the_content_terms_without_slot_words():
    assert asked_slot("How many days of parental leave do I get?").subject == {"parent", "leav"}
    assert asked_slot("What's the email address for payroll?").subject == {"payroll"}
    # A slot word of another kind stays: the phone is what the stipend is for.
    assert "phon" in asked_slot("How much is the phone stipend?").subject
    assert "phon" not in asked_slot("What's the phone number for security?").subject


def test_subject_share():
    slot = asked_slot("How many days of parental leave do I get?")
    assert subject_share(slot, "Parental leave is 12 weeks.") == 1.0
    assert subject_share(slot, "Sick leave is 13 days.") == 0.5
    assert subject_share(slot, "Nothing relevant.") == 0.0
    assert subject_share(AskedSlot("open"), "anything") == 1.0


# --- values -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, sentence, values", [
    ("amount", "Parking is reimbursed up to $1,200 per year.", ["$1,200"]),
    ("amount", "The stipend is USD 50 a month, or 50 dollars.", ["USD 50", "50 dollars"]),
    ("amount", "Meals cost €30 in Berlin and £25 in London.", ["€30", "£25"]),
    ("amount", "SDRs earn $1k per deal.", ["$1k"]),
    ("amount", "Meals are paid at the GSA per diem rate.", ["per diem"]),
    ("percentage", "The match is 15% of salary, or fifteen percent.", ["15%", "fifteen percent"]),
    ("percentage", "Up to 4.5 percent is matched.", ["4.5 percent"]),
    ("duration", "You may use 13 days (104 hours) of sick leave.", ["13 days", "104 hours"]),
    ("duration", "Report it within one hour, or two weeks at most.", ["one hour", "two weeks"]),
    ("duration", "There is a 90-day waiting period.", ["90-day"]),
    ("duration", "Book 15 or more days ahead.", ["15 or more days"]),
    ("duration", "File within thirty (30) days.", ["thirty (30) days"]),
    ("duration", "Retros take 60 to 90 minutes, twice per week.", ["60 to 90 minutes", "twice per week"]),
    ("duration", "We test on an annual basis; payroll is biweekly.", ["annual basis", "biweekly"]),
    ("duration", "Allow 30 calendar days or 5 business days.", ["30 calendar days", "5 business days"]),
    ("date", "Claims are due March 15, 2024 or by 4/30/2024.", ["March 15, 2024", "4/30/2024"]),
    ("date", "Pay lands on the 15th and the last day of the month.", ["15th", "last day"]),
    ("date", "The holiday moves to the following Monday.", ["following Monday"]),
    ("date", "The sync is on Mondays at 10am.", ["Mondays", "10am"]),
    ("date", "The policy changed on 2023-07-01.", ["2023-07-01"]),
    ("date", "Enrollment opens in May.", ["in May"]),
    ("count", "Keys must be at least 2048 bits, and three reviewers sign.", ["2048", "three"]),
    ("contact", "Email hr@example.com or call (202) 555-0143.", ["hr@example.com", "(202) 555-0143"]),
    ("contact", "Post in #it-help or ping @Halp.", ["#it-help", "@Halp"]),
    ("contact", "Mail it to 548 Market St, Suite 300.", ["548 Market St", "Suite 300"]),
    ("contact", "Forms are at https://example.com/forms.", ["https://example.com/forms"]),
    ("contact", "Ask the Help Desk or your People Partner.", ["Help Desk", "People Partner"]),
    ("list", "Bring your ID, your badge and your laptop.", ["Bring your ID", "your badge", "your laptop"]),
])
def test_values_found(kind, sentence, values):
    assert slot_values(kind, sentence) == values
    assert holds_slot(AskedSlot(kind), sentence)


@pytest.mark.parametrize("kind, sentence", [
    ("amount", "Submit receipts for every purchase within 30 days."),
    ("percentage", "The company shares the premium with you."),
    ("duration", "Ask your manager before you book."),
    ("date", "You may take the day you choose."),   # "may" the verb is no month
    ("count", "Ask your manager first."),
    ("contact", "The Company reserves the right to change this policy."),
    ("list", "Just one thing matters here."),
    ("yes_no", "Cryptomining"),
])
def test_values_not_found(kind, sentence):
    assert not holds_slot(AskedSlot(kind), sentence)
    if kind not in ("yes_no", "list"):
        assert slot_values(kind, sentence) == []


def test_neighbouring_kinds_are_accepted():
    assert holds_slot(AskedSlot("duration"), "Unused funds may be spent until March 15.")
    assert holds_slot(AskedSlot("date"), "You can use PTO after 90 days.")
    assert holds_slot(AskedSlot("amount"), "The bonus is 3.85% of base pay.")
    assert not holds_slot(AskedSlot("duration"), "The policy was last updated in 2023.")  # a bare year is weak
    assert holds_slot(AskedSlot("date"), "The policy was last updated in 2023.")


def test_a_polar_value_question_is_held_by_a_negation():
    slot = asked_slot("Is there a phone number I can call for support?")
    assert slot.kind == "contact" and slot.polar
    assert holds_slot(slot, "GitHub does not offer telephone support.")
    assert not holds_slot(AskedSlot("contact"), "GitHub does not offer telephone support.")


def test_yes_no_is_a_weak_check():
    slot = asked_slot("Can I expense laundry on a three-night trip?")
    assert holds_slot(slot, "Laundry is reimbursable only for trips of 4 consecutive nights or more.")
    assert holds_slot(slot, "Laundry counts as an incidental expense.")
    assert holds_slot(slot, "Trips of 4 nights cover laundry.")          # any value
    assert holds_slot(slot, "Laundry at the hotel", list_item=True)      # an item of a list of rules
    assert not holds_slot(slot, "Laundry at the hotel")
    assert slot_values("yes_no", "You may not expense it.") == ["may", "not"]


def test_list_slot():
    slot = asked_slot("What are the company holidays?")
    assert holds_slot(slot, "We observe the following holidays:")
    assert holds_slot(slot, "- New Year's Day")
    assert holds_slot(slot, "New Year's Day", list_item=True)
    assert not holds_slot(slot, "Holidays are published every year.")


def test_open_slot_holds_any_sentence():
    assert holds_slot(asked_slot("How do I request a badge?"), "Use the badge portal.")
    assert not holds_slot(asked_slot("How do I request a badge?"), "   ")


# --- describe ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("question, described", [
    ("How much does parking cost?", "the amount"),
    ("What percentage does the 401k match?", "the percentage"),
    ("How long is parental leave?", "how long"),
    ("When is open enrollment?", "the date"),
    ("How many people fit in room 4?", "how many"),
    ("Who do I contact about payroll?", "the contact details"),
    ("What are the steps to get a badge?", "the list"),
    ("How do I get a badge?", "that"),
    ("Can I use the bonding leave yet?", "whether you can use the bonding leave yet"),
    ("Am I allowed to work from Portugal?", "whether you are allowed to work from Portugal"),
    ("Do I get paid days off to move?", "whether you get paid days off to move"),
    ("Is parking reimbursed?", "whether parking is reimbursed"),
    ("Does our insurance cover me abroad?", "whether that is the case"),
])
def test_describe(question, described):
    assert describe(asked_slot(question)) == described


def test_describe_never_repeats_control_characters_or_a_long_question():
    slot = asked_slot("Can I \x1b[31mexpense\u202e this?")
    assert "\x1b" not in describe(slot) and "\u202e" not in describe(slot)
    assert describe(asked_slot("Can I " + "really " * 100 + "go?")) == "whether that is the case"
    assert describe(AskedSlot("yes_no")) == "whether that is the case"
    assert describe(AskedSlot("no-such-kind")) == "that"


# --- bad input --------------------------------------------------------------------------------------


NO_CUE = ["", "   ", "x" * 10_000, "¿Cuántos días de vacaciones tengo?", "休暇は何日ですか", None, 42]


@pytest.mark.parametrize("question", NO_CUE + ["?", "how long " * 2_000, "\ud800 lone surrogate?", "\x00\x01\x02"])
def test_bad_questions_give_a_sensible_slot(question):
    slot = asked_slot(question)
    assert slot.kind in SLOT_KINDS
    assert isinstance(slot.subject, frozenset)
    assert isinstance(describe(slot), str)
    if question in NO_CUE:
        assert slot.kind == "open"


@pytest.mark.parametrize("sentence", ["", "   ", "x" * 10_000, "休暇は10日です", "\ud800", None])
def test_bad_sentences_never_raise(sentence):
    for kind in SLOT_KINDS:
        holds_slot(AskedSlot(kind), sentence)
        holds_slot(AskedSlot(kind, polar=True), sentence)
        assert isinstance(slot_values(kind, sentence), list)
        assert 0.0 <= subject_share(AskedSlot(kind, frozenset({"vacat"})), sentence) <= 1.0
    assert not holds_slot(AskedSlot("duration"), "")
    assert not holds_slot(AskedSlot("open"), "")


def test_inputs_are_bounded():
    # The value past the bound is not read: the head of a huge sentence is what counts.
    assert not holds_slot(AskedSlot("amount"), "x " * slots.MAX_SENTENCE_CHARS + "$50")
    assert asked_slot("x " * slots.MAX_QUESTION_CHARS + "How long is leave?").kind == "open"


@pytest.mark.parametrize("piece", ["1 ", "how much ", "What is the cap ", "$1, ", "Who do I contact, ", "A B ",
                                   "a@b.c ", "#a @b ", "May 1 ", "\n", ", ", "1/1/2024 ", "é"])
def test_adversarial_input_is_fast(piece):
    text = (piece * (10_000 // len(piece) + 1))[:10_000]
    start = time.perf_counter()
    slot = asked_slot(text)
    for kind in SLOT_KINDS:
        slot_values(kind, text)
        holds_slot(AskedSlot(kind, polar=True), text)
    describe(slot)
    subject_share(slot, text)
    assert time.perf_counter() - start < 0.5


# --- linear time ------------------------------------------------------------------------------------


def test_every_pattern_is_a_registered_linear_time_pattern():
    names = {name for name in regex.registered() if name.startswith("answer.slots.")}
    in_module = [value for value in vars(slots).values()
                 if isinstance(value, regex.LinearPattern) and value.name.startswith("answer.slots.")]
    in_module += [pattern for patterns in slots.VALUE_PATTERNS.values() for pattern, _ in patterns]
    in_module += list(slots.CUES.values())
    assert in_module and all(regex.registered()[pattern.name] is pattern for pattern in in_module)
    assert {pattern.name for pattern in in_module} == names
    assert not [value for value in vars(slots).values() if isinstance(value, re.Pattern)]
    assert len(names) >= 40


def test_the_linear_time_test_covers_this_module():
    from tests.security.test_regex_linear_time import MODULES

    assert "citadel.answer.slots" in MODULES
