"""Whether the case meets the rule (DESIGN.md §10): a decision, not a list of facts.

"Acme renews next month. Are they eligible for the multi-year discount?" is answered first with the
verdict and the comparisons behind it, computed here by code from the numbered sources of the
synthesis, each operand cited where it stands:

    Acme is eligible for the multi-year discount of up to 12% [3]: customer tenure since 15 January
    2023, 3 years 10 months by 1 December 2026 (the renewal next month) ≥ 2 years [2][1]; annual
    revenue $740,000 ≥ $500,000 [4][1].

criteria.py says which criteria a rule has and whether some passage speaks to one; this module says
whether each holds. A criterion's threshold is read from its requirement as the rule's table states
it ("at least $500,000 …", "over 500,000 USD", "2 years or more") and cites the rule's source; the
case's fact is read from a source of another document that settles the check (criteria.py
`met_by`): an amount from the sentence that names the criterion, or, for a duration, the start date
the source states (the verifier's date helpers: one date parser). The date a tenure is measured to
is the one the question implies ("renews next month": every day of next month; a criterion is
settled only when it comes out the same on the first and the last of them), else today from the
caller's clock.

The verdict follows the evidence and goes no further: every criterion met → eligible; one failed →
not eligible, with the failing comparison; none failed but one unsettled (its fact is not among the
sources, or the date asked about decides it) → the conditional that would settle it ("If Acme's
customer tenure began on or before 1 December 2024, …"), stated only beside a comparison that
holds. A threshold that cannot be read, or a rule that no source cites, gives no decision at all. The
sentence goes first in the draft and passes the validator and the claim verifier like any other
(citadel/quality/verifier.py recomputes its durations and comparisons); `computed` is what code
derived here (the dates and durations no source writes), evidence for the validator's figure check.
"""

from __future__ import annotations

import calendar
import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from citadel import regex
from citadel.agent.criteria import ELIGIBILITY, CriterionCheck, case_object, criteria_checks, criteria_rows
from citadel.agent.evidence import UNIFORM_IDF
from citadel.answer.gate import TermIdf
from citadel.answer.quantities import (add_months, comparison_holds, months_between, parse_dates, parse_figure,
                                       spell_date, spell_duration, spell_figure, start_date)
from citadel.prompting.source import Source
from citadel.text import content_terms, sentence_pieces
from citadel.types import Passage

ELIGIBLE, NOT_ELIGIBLE, CONDITIONAL = "eligible", "not_eligible", "conditional"
MET, FAILED, UNSETTLED = "met", "failed", "unsettled"
# A rule's requirement or a fact is read from at most this many characters.
MAX_TEXT_CHARS = 2_000

_AMOUNT = r"[$€£]?\d[\d,]*(?:\.\d+)?%?"
_SCALE = r"(?:\s*(?:k|m|bn|thousand|million|billion)\b)?"
_UNIT = r"(?:\s*(?:years?|months?|USD|EUR|GBP|dollars?|euros?|pounds?)\b)?"
# "at least $500,000", "≥ 2 years", "over 500,000 USD": a threshold after its operator …
THRESHOLD_AFTER = regex.compile(
    "agent.decision.threshold_after",
    rf"(?P<op>≥|>=|≤|<=|>|<|\bat least|\bno less than|\bnot less than|\bminimum(?: of)?|\bmore than|\bover|\babove|"
    rf"\bexceeding|\bgreater than|\bat most|\bno more than|\bnot more than|\bmaximum(?: of)?|\bless than|\bunder|"
    rf"\bbelow|\bup to)\s*(?P<value>{_AMOUNT})(?P<scale>{_SCALE})(?P<unit>{_UNIT})",
    regex.IGNORECASE)
# … or before it: "2 years or more", "$500,000 or above".
THRESHOLD_BEFORE = regex.compile(
    "agent.decision.threshold_before",
    rf"(?:^|[^\w.])(?P<value>{_AMOUNT})(?P<scale>{_SCALE})(?P<unit>{_UNIT})\s+or\s+"
    r"(?P<op>more|longer|above|greater|higher|over|less|fewer|shorter|below|lower|under)\b",
    regex.IGNORECASE)
# A figure a fact states: "$740,000", "1.2 million USD", "18%".
FACT_FIGURE = regex.compile("agent.decision.fact_figure",
                            rf"(?:^|[^\w.])(?P<value>{_AMOUNT})(?P<scale>{_SCALE})(?P<unit>{_UNIT})",
                            regex.IGNORECASE)
# What a rule grants the eligible: "receive a multi-year discount of up to 12%".
GRANT = regex.compile("agent.decision.grant", r"\bup to\s+(?P<grant>\d{1,3}(?:\.\d+)?%)", regex.IGNORECASE)
# When the question says the case is decided: "renews next month", "signs on 1 March 2027", "in 3 months".
OCCASION = regex.compile("agent.decision.occasion", r"\b(?P<word>renew|sign|start|expir|clos|join)[a-z]*\b",
                         regex.IGNORECASE)
PERIOD = regex.compile("agent.decision.period",
                       r"\b(?:(?P<which>this|next)\s+(?P<unit>month|year)|in\s+(?P<count>\d{1,2})\s+months?|"
                       r"(?P<day>today|tomorrow))\b", regex.IGNORECASE)
OCCASION_NOUNS = {"renew": "the renewal", "sign": "the signing", "start": "the start", "expir": "the expiry",
                  "clos": "the closing", "join": "the joining"}

_OPERATORS = {"≥": "≥", ">=": "≥", "≤": "≤", "<=": "≤", ">": ">", "<": "<", "at least": "≥", "no less than": "≥",
              "not less than": "≥", "minimum": "≥", "minimum of": "≥", "more than": ">", "over": ">", "above": ">",
              "exceeding": ">", "greater than": ">", "at most": "≤", "no more than": "≤", "not more than": "≤",
              "maximum": "≤", "maximum of": "≤", "up to": "≤", "less than": "<", "under": "<", "below": "<",
              # after the figure: "2 years or more"
              "more": "≥", "longer": "≥", "greater": "≥", "higher": "≥", "fewer": "≤", "shorter": "≤", "lower": "≤"}
_POSTFIX = {"above": "≥", "over": "≥", "less": "≤", "below": "≤", "under": "≤"}
NEGATION = {"≥": "<", ">": "≤", "≤": ">", "<": "≥"}
OP_WORDS = {"≥": "at least", ">": "above", "≤": "at most", "<": "below"}
SCALES = {"k": 1e3, "thousand": 1e3, "m": 1e6, "million": 1e6, "bn": 1e9, "billion": 1e9}
CURRENCY_WORDS = {"usd": "$", "dollar": "$", "dollars": "$", "eur": "€", "euro": "€", "euros": "€", "gbp": "£",
                  "pound": "£", "pounds": "£"}


@dataclass(frozen=True)
class Threshold:
    """A criterion's bar: `value` an amount, or months for a duration; `written` as the decision
    writes it ("$500,000", "2 years"); `currency` "$", "€", "£" or "" (a count or a share)."""

    op: str
    value: float
    duration: bool
    written: str
    currency: str = ""
    percent: bool = False


@dataclass(frozen=True)
class AsOf:
    """The days the case is decided on: the question's occasion ("the renewal next month": each day of
    next month), else today. `label` says which in the sentence."""

    earliest: datetime.date
    latest: datetime.date
    label: str


@dataclass(frozen=True)
class Finding:
    """One criterion weighed: MET or FAILED with its cited comparison (`clause`), or UNSETTLED with
    the condition that would settle it; `computed`: what code derived for it."""

    outcome: str
    clause: str = ""
    condition: str = ""
    computed: str = ""


@dataclass(frozen=True)
class Decision:
    """The first sentence of the answer (`text`, with its markers) and what code computed for it."""

    verdict: str
    text: str
    computed: str


# ---------------------------------------------------------------------- the rule's thresholds
def parse_threshold(text: str) -> Threshold | None:
    """The one threshold a requirement states, or None when it states none or several (then code
    cannot decide the criterion, and no decision is made)."""
    text = text[:MAX_TEXT_CHARS]
    found = [(m, _OPERATORS[_space(m.group("op")).lower()]) for m in THRESHOLD_AFTER.finditer(text)]
    found += [(m, _POSTFIX.get(m.group("op").lower()) or _OPERATORS[m.group("op").lower()])
              for m in THRESHOLD_BEFORE.finditer(text)]
    if len(found) != 1:
        return None
    match, op = found[0]
    value = _figure(match.group("value"), match.group("scale"))
    unit = _space(match.group("unit")).lower()
    if value is None:
        return None
    if unit.startswith(("year", "month")):
        if match.group("value")[:1] in "$€£" or match.group("value").endswith("%") or value != int(value):
            return None  # "$2 years": not a duration
        months = int(value) * (12 if unit.startswith("year") else 1)
        return Threshold(op, months, True, f"{int(value)} {unit}")  # as the rule writes it: its figure is cited
    currency = _currency(match.group("value"), unit)
    written = _spelled(value, match.group("value"), match.group("scale"), currency)
    return Threshold(op, value, False, written, currency, match.group("value").endswith("%"))


def _space(text: str | None) -> str:
    return " ".join((text or "").split())


def _figure(token: str, scale: str | None) -> float | None:
    value = parse_figure(token)
    return None if value is None else value * SCALES.get(_space(scale).lower(), 1.0)


def _currency(token: str, unit: str) -> str:
    return token[0] if token[:1] in "$€£" else CURRENCY_WORDS.get(unit, "")


def _spelled(value: float, token: str, scale: str | None, currency: str) -> str:
    """A figure in full, the way its source writes figures ("$1.2 million" → "$1,200,000": the
    verifier compares figures, not words)."""
    like = "0" if _space(scale) else token.lstrip("$€£").rstrip("%")
    return f"{currency}{spell_figure(value, like)}{'%' if token.endswith('%') else ''}"


# ---------------------------------------------------------------------- the date asked about
def as_of(question: str, today: datetime.date) -> AsOf:
    """The days the question decides the case on: a date it states, a period it names ("next
    month", "this year", "in 3 months", "tomorrow"), else today."""
    question = question[:MAX_TEXT_CHARS]
    occasion = OCCASION.search(question)
    noun = OCCASION_NOUNS[occasion.group("word").lower()] if occasion else ""
    dates = parse_dates(question)
    if dates:
        return AsOf(dates[0][1], dates[0][1], noun or "the date asked about")
    period = PERIOD.search(question)
    if period is None:
        return AsOf(today, today, "today")
    said = _space(period.group(0)).lower()
    label = f"{noun} {said}".strip()
    if period.group("day"):
        day = today if said == "today" else today + datetime.timedelta(days=1)
        return AsOf(day, day, label)
    if period.group("count"):
        first = add_months(today.replace(day=1), int(period.group("count")))
        return AsOf(first, _month_end(first), label)
    if period.group("unit").lower() == "year":
        year = today.year + (period.group("which").lower() == "next")
        return AsOf(max(today, datetime.date(year, 1, 1)), datetime.date(year, 12, 31), label)
    first = add_months(today.replace(day=1), 1 if period.group("which").lower() == "next" else 0)
    return AsOf(max(today, first), _month_end(first), label)


def _month_end(day: datetime.date) -> datetime.date:
    return day.replace(day=calendar.monthrange(day.year, day.month)[1])


# ---------------------------------------------------------------------- one criterion
def weigh(check: CriterionCheck, threshold: Threshold, rule: int, sources: Sequence[Source], when: AsOf,
          idf: TermIdf) -> Finding:
    """The criterion for the case, from the first source of another document that settles it."""
    settling = [s for s in sources if check.met_by(replace(s.passage, text=s.text), idf)]
    name = check.criterion.lower()
    if threshold.duration:
        return _weigh_tenure(check, threshold, rule, settling, when, name)
    for source in settling:
        fact = _fact_figure(check, threshold, source.text)
        if fact is None:
            continue
        value, written = fact
        holds = comparison_holds(value, threshold.op, threshold.value)
        op = threshold.op if holds else NEGATION[threshold.op]
        clause = f"{name} {written} {op} {threshold.written} [{source.number}][{rule}]"
        return Finding(MET if holds else FAILED, clause, computed=f"{written} {op} {threshold.written}")
    return Finding(UNSETTLED, condition=f"{check.subject}'s {name} is {OP_WORDS[threshold.op]} {threshold.written} "
                                        f"[{rule}]")


def _weigh_tenure(check: CriterionCheck, threshold: Threshold, rule: int, settling: Sequence[Source], when: AsOf,
                  name: str) -> Finding:
    """A duration since the start date a source states, to each end of the days asked about."""
    required = int(threshold.value)
    for source in settling:
        started = start_date(source.text[:MAX_TEXT_CHARS])
        if started is None or started > when.earliest:
            continue  # no start date, or one after the case is decided: not a tenure
        at_first = comparison_holds(months_between(started, when.earliest), threshold.op, required)
        at_last = comparison_holds(months_between(started, when.latest), threshold.op, required)
        if at_first != at_last:  # which day of the period it is decides: say from when it holds
            turn = add_months(started, required + (threshold.op == ">"))
            side = "on or after" if at_last else "before"
            return Finding(UNSETTLED, condition=f"{when.label} is {side} {spell_date(turn)} [{source.number}][{rule}]",
                           computed=f"{spell_date(started)} + {spell_duration(required)} = {spell_date(turn)}")
        # The tightest day: the first for a bar a longer tenure meets, the last for one it fails.
        grows = threshold.op in ("≥", ">")
        day = when.earliest if grows == at_first else when.latest
        months = months_between(started, day)
        op = threshold.op if at_first else NEGATION[threshold.op]
        clause = (f"{name} since {spell_date(started)}, {spell_duration(months)} by {spell_date(day)} ({when.label}) "
                  f"{op} {threshold.written} [{source.number}][{rule}]")
        return Finding(MET if at_first else FAILED, clause,
                       computed=f"{spell_duration(months)} from {spell_date(started)} to {spell_date(day)}")
    # Unknown start: the latest start date that meets the bar on every day asked about.
    grows = threshold.op in ("≥", ">")
    bound = add_months(when.earliest if grows else when.latest, -required)
    side = ("on or before" if threshold.op == "≥" else "before") if grows else (
        "on or after" if threshold.op == "≤" else "after")
    condition = (f"{check.subject}'s {name} began {side} {spell_date(bound)}, {threshold.written} before "
                 f"{spell_date(when.earliest if grows else when.latest)} ({when.label}) [{rule}]")
    return Finding(UNSETTLED, condition=condition,
                   computed=f"{spell_date(bound)} = {spell_date(when.earliest if grows else when.latest)} - "
                            f"{spell_duration(required)}")


def _fact_figure(check: CriterionCheck, threshold: Threshold, text: str) -> tuple[float, str] | None:
    """(value, as the decision writes it) of the figure the source's sentence that names the criterion
    states, of the threshold's kind (a currency amount, a share, a count), or None."""
    own, required = check.terms()
    best: tuple[int, float, str] | None = None
    for sentence, _ in sentence_pieces(text[:MAX_TEXT_CHARS]):
        terms = set(content_terms(sentence))
        named = len(own & terms) if own else len(required & terms)
        if named == 0 or (best is not None and named <= best[0]):
            continue
        figure = _figure_of_kind(sentence, threshold)
        if figure is not None:
            best = (named, *figure)
    return (best[1], best[2]) if best else None


def _figure_of_kind(sentence: str, threshold: Threshold) -> tuple[float, str] | None:
    dates = parse_dates(sentence)
    date_starts, years = {at for at, _ in dates}, {str(day.year) for _, day in dates}
    for match in FACT_FIGURE.finditer(sentence):
        token, unit = match.group("value"), _space(match.group("unit")).lower()
        if unit.startswith(("year", "month")) or token in years or match.start() + match.group(0).find(token) in date_starts:
            continue  # a duration, or a date's day or year
        currency = _currency(token, unit)
        if token.endswith("%") != threshold.percent or (threshold.currency and currency != threshold.currency):
            continue
        if not threshold.currency and currency:
            continue  # a count's bar is not met by an amount of money
        value = _figure(token, match.group("scale"))
        if value is not None:
            return value, _spelled(value, token, match.group("scale"), currency)
    return None


# ---------------------------------------------------------------------- the decision
# A policy id → the (document id, version) of its current approved revision that the caller may read
# now, or None (citadel/catalog/policies.py resolve_policy, bound to the run's principal).
PolicyLookup = Callable[[str], "tuple[str, int] | None"]


def decide(question: str, sources: Sequence[Source], today: datetime.date, earlier: Sequence[str] = (),
           idf: TermIdf | None = None, policies: PolicyLookup | None = None) -> Decision | None:
    """The decision on an eligibility question from the numbered sources, or None: not an eligibility
    question, no rule among the sources, a threshold that cannot be read, a rule that is not its
    policy's current approved revision (`rule_is_current`), or nothing to state that the evidence
    carries. `today`: the caller's clock; `earlier`: the user's earlier questions; `policies`: how a
    policy id resolves for the caller."""
    checks = criteria_checks(question, [s.passage for s in sources], earlier)
    if not checks:
        return None
    when = as_of(question, today)
    findings: list[Finding] = []
    for check in checks:
        threshold = parse_threshold(f"{check.criterion}: {check.requirement}")
        rule = _rule_source(check, sources)
        if threshold is None or rule is None:
            return None  # a bar code cannot read, or one no source cites: no verdict
        if not rule_is_current(next(s.passage for s in sources if s.number == rule), policies):
            return None  # a rule search found is not what its policy id resolves to: no verdict
        findings.append(weigh(check, threshold, rule, sources, when, idf or UNIFORM_IDF))
    return compose(checks[0].subject, case_object(question), _grant(checks[0].document_id, sources), findings)


def compose(subject: str, wanted: str | None, grant: tuple[str, int] | None, findings: Sequence[Finding]) -> Decision | None:
    """The sentence: not eligible on any failed criterion (with the failed comparisons), eligible when
    every one is met, else the conditional beside the comparisons that hold (None when none holds)."""
    computed = "; ".join(f.computed for f in findings if f.computed)
    failed = [f.clause for f in findings if f.outcome == FAILED]
    met = [f.clause for f in findings if f.outcome == MET]
    unsettled = [f.condition for f in findings if f.outcome == UNSETTLED]
    if failed:
        target = f" for {wanted}" if wanted else ""
        return Decision(NOT_ELIGIBLE, f"{subject} is not eligible{target}: {'; '.join(failed)}.", computed)
    if not met:
        return None
    target = (f" for {wanted}" if wanted else "") + (
        f"{' of' if wanted else ' for'} {grant[0]} [{grant[1]}]" if grant else "")
    claim = f"{subject} is eligible{target}: {'; '.join(met)}."
    if not unsettled:
        return Decision(ELIGIBLE, claim, computed)
    return Decision(CONDITIONAL, f"If {' and '.join(unsettled)}, {claim}", computed)


def rule_is_current(rule: Passage, policies: PolicyLookup | None) -> bool:
    """Whether a rule found by search may decide. A rule whose document the catalog names as a policy
    (its governance's policy id) decides only when that id, resolved for the caller, is this very
    document version: a superseded revision, one the caller may no longer read, or an id that resolves
    to nothing gives no verdict — no policy match never means a condition met or access granted. A rule
    no policy id names is read as found."""
    policy_id = rule.governance.policy_id
    if policy_id is None:
        return True
    current = policies(policy_id) if policies is not None else None
    return current == (rule.document_id, rule.version)


def _rule_source(check: CriterionCheck, sources: Sequence[Source]) -> int | None:
    """The number of the source that states the criterion (the rule's table)."""
    for source in sources:
        if source.passage.document_id == check.document_id and (check.criterion, check.requirement) in (
                criteria_rows(source.passage)):
            return source.number
    return None


def _grant(document_id: str, sources: Sequence[Source]) -> tuple[str, int] | None:
    """("up to 12%", its source's number) from the rule's document: what eligibility gives."""
    for source in sources:
        if source.passage.document_id != document_id:
            continue
        for sentence, _ in sentence_pieces(source.text[:MAX_TEXT_CHARS]):
            match = GRANT.search(sentence)
            if match and ELIGIBILITY.search(sentence):
                return f"up to {match.group('grant')}", source.number
    return None
