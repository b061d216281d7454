"""Whether a rule applies to a case (DESIGN.md §10): the case's subject and the rule's criteria.

"Acme renews next month. Are they eligible for the multi-year discount?" cannot be answered from the
rule alone: the policy's eligibility table names the criteria (annual revenue, customer tenure), and
each criterion needs a fact about Acme from somewhere else. Once the evidence holds such a rule, each
of its criteria becomes a check on the run's checklist — "Acme: Customer tenure (at least 2 years …)"
— and the loop searches for it like any other missing part; a check no document settles is what the
answer says it could not confirm.

Deterministic on purpose (the rules backend has no model): the subject is the first proper name in
an eligibility question; the criteria are the rows of a table (or the items of a list) in a passage
whose heading names eligibility, criteria or requirements. A check is met by a passage of another
document that names the subject and holds at least `CHECK_COVERAGE` of the criterion's terms or of
its requirement's (a fact is worded differently from the rule it satisfies, so the bar is lower than
the gate's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from citadel import regex
from citadel.agent.plan import MAX_ASK_CHARS
from citadel.answer.gate import TermIdf, passage_terms, weighted_coverage
from citadel.text import STOPWORDS, content_terms
from citadel.types import Passage

# A question asking whether a rule applies to a case (the router's "eligibility" rule, in short).
ELIGIBILITY = regex.compile("agent.criteria.eligibility", r"\b(?:eligib|qualif|entitle)[a-z]*\b", regex.IGNORECASE)
# What a case asks to be eligible for: "eligible for the multi-year discount?" → "the multi-year discount".
CASE_OBJECT = regex.compile("agent.criteria.case_object",
                            r"\b(?:eligible|qualify|qualifies|entitled)\s+(?:for|to)\s+([^?.!;\n]{1,80})", regex.IGNORECASE)
# A heading under which a rule lists its conditions.
CRITERIA_HEADING = regex.compile("agent.criteria.heading", r"\b(?:eligib|criteri|requirement|qualif|condition)[a-z]*\b",
                                 regex.IGNORECASE)
# A run of capitalised words: a name ("Acme", "Acme Corp"), or a sentence's first word.
CAPITALISED_RUN = regex.compile("agent.criteria.capitalised_run", r"[A-Z][A-Za-z0-9&-]*(?:[ ]+[A-Z][A-Za-z0-9&-]*)*")
# A table's separator row ("| --- | :---: |") and a list item's marker.
TABLE_SEPARATOR = regex.compile("agent.criteria.table_separator", r"^[|:\-\s]+$")
LIST_ITEM = regex.compile("agent.criteria.list_item", r"^\s*(?:[-*•]|\d{1,2}[.)])\s+")
# Capitalised words that start a sentence without naming anything.
NOT_NAMES = frozenset({"what", "which", "who", "whom", "whose", "when", "where", "why", "how", "whether", "please",
                       "tell", "list", "explain", "describe", "find", "show", "give", "yes", "no", "hi", "hello"})
# The share of a criterion's terms a passage naming the subject must hold to settle it.
CHECK_COVERAGE = 0.5
MAX_CHECKS = 6
MAX_CELL_CHARS = 200


@dataclass(frozen=True)
class CriterionCheck:
    """One condition of a rule (`document_id`'s) to be settled for the case's subject."""

    subject: str
    criterion: str
    requirement: str
    document_id: str

    @property
    def ask(self) -> str:
        requirement = f" ({self.requirement})" if self.requirement else ""
        return f"{self.subject}: {self.criterion}{requirement}"[:MAX_ASK_CHARS]

    def terms(self) -> tuple[set[str], set[str]]:
        """The criterion's own words and its requirement's, each less figures (the value is what is
        looked up) and the subject's words."""
        subject = set(content_terms(self.subject))

        def words(text: str) -> set[str]:
            return {t for t in content_terms(text) if not t.isdigit() and t not in subject}

        return words(self.criterion), words(self.requirement)

    def met_by(self, passage: Passage, idf: TermIdf) -> bool:
        """A passage of another document that names the subject and holds enough of the criterion's
        words or of its requirement's ("tenure" is measured "since the start date of the agreement")."""
        if passage.document_id == self.document_id:
            return False  # the rule states the condition; it does not settle it for the case
        held = passage_terms(passage)
        if not set(content_terms(self.subject)) <= held:
            return False
        return any(not terms or weighted_coverage(terms, held, idf) >= CHECK_COVERAGE for terms in self.terms())


def case_subject(question: str, earlier: Sequence[str] = ()) -> str | None:
    """The first proper name in an eligibility question ("Acme"), or, when it names none ("Are they
    eligible …?"), the first in the latest earlier question of the conversation that names one (the
    user's own words only); None for any other question."""
    if not ELIGIBILITY.search(question):
        return None
    for text in (question, *reversed(earlier)):
        name = first_name(text)
        if name is not None:
            return name
    return None


def first_name(text: str) -> str | None:
    for match in CAPITALISED_RUN.finditer(text):
        words = [w for w in match.group(0).split() if w.lower() not in STOPWORDS and w.lower() not in NOT_NAMES]
        if words:
            return " ".join(words)
    return None


def case_object(question: str) -> str | None:
    """What an eligibility question asks to be eligible for ("the multi-year discount"), or None."""
    match = CASE_OBJECT.search(question)
    return match.group(1).strip() if match else None


def criteria_rows(passage: Passage) -> list[tuple[str, str]]:
    """(criterion, requirement) for each row of a table or item of a list in a passage whose own
    heading names conditions; a table's first row is its header."""
    own_heading = passage.heading.rsplit(">", 1)[-1]
    if not CRITERIA_HEADING.search(own_heading):
        return []
    rows: list[tuple[str, str]] = []
    header_seen = False
    for line in passage.text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|"):
            if TABLE_SEPARATOR.search(stripped):
                continue
            cells = [c.strip()[:MAX_CELL_CHARS] for c in stripped.strip("|").split("|")]
            if not header_seen:
                header_seen = True  # the header row names the columns, not a criterion
            elif cells and cells[0]:
                rows.append((cells[0], "; ".join(c for c in cells[1:] if c)))
        elif LIST_ITEM.search(line):
            item = LIST_ITEM.sub("", line, count=1).strip()
            name, _, rest = item.partition(":")
            if name:
                rows.append((name.strip()[:MAX_CELL_CHARS], rest.strip()[:MAX_CELL_CHARS]))
    return rows


def criteria_checks(question: str, passages: Sequence[Passage], earlier: Sequence[str] = ()) -> list[CriterionCheck]:
    """The checks an eligibility question needs, from the rules among the passages (each criterion
    once); `earlier`: the user's earlier questions, where a follow-up finds its subject."""
    subject = case_subject(question, earlier)
    if subject is None:
        return []
    checks: dict[str, CriterionCheck] = {}
    for passage in passages:
        for criterion, requirement in criteria_rows(passage):
            key = " ".join(content_terms(criterion))
            if key and key not in checks and len(checks) < MAX_CHECKS:
                checks[key] = CriterionCheck(subject, criterion, requirement, passage.document_id)
    return list(checks.values())


def open_checks(checks: Sequence[CriterionCheck], passages: Sequence[Passage], idf: TermIdf) -> list[CriterionCheck]:
    """The checks no passage settles yet."""
    return [c for c in checks if not any(c.met_by(p, idf) for p in passages)]
