"""What a run has found, and what it still lacks (DESIGN.md §10).

Owns the evidence a run gathers across steps: passages kept in the run store as plain records (a
resumed run rebuilds them from the log), which parts of the plan's `done_when` checklist they cover,
and the rule that lets a round skip reflection. Coverage reuses the gate's own helpers (IDF-weighted terms, one passage at a time, since
an answer is quoted from one place), so the loop and the single-shot gate agree on "covered".

Version conflicts among the evidence are found and resolved in citadel/answer/conflicts.py, as on the
single-shot path: only by reliable metadata (a published document over one that is not; an explicit
`supersedes`; the later of two effective dates that are both already in force). A superseded version
is retired at publish and never reaches the evidence, so the catalog's `supersedes` is read too (the
caller adds the predecessor's record, `predecessor_ids`). The lines of evidence a reviewer reads are
citadel/reviews/evidence.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from citadel.agent.budget import TokenMeter
from citadel.agent.criteria import CriterionCheck, criteria_checks, open_checks
from citadel.agent.plan import SEARCH
from citadel.agent.records import succeeded
from citadel.answer.conflicts import predecessor_ids
from citadel.answer.gate import TermIdf, passage_terms, term_idf, weighted_coverage
from citadel.catalog.base import DocumentRecord
from citadel.chunking import count_tokens
from citadel.text import STOPWORDS, content_terms, stem, words_of
from citadel.types import Governance, Passage

# Every term weighs the same when the tenant's IDF is not at hand (no partition loaded).
UNIFORM_IDF = TermIdf({}, 1.0)
# A part of the checklist is covered when one passage holds this IDF share of its terms (the gate's
# default `min_coverage`).
DEFAULT_MIN_COVERAGE = 0.6
# Reflection is skipped when each part is covered at least this well and every term of the question
# appears in the top passages: nothing is left for a reflection to find.
HIGH_COVERAGE = 0.8
# The top passages (by score) the skip rule reads.
SKIP_RULE_PASSAGES = 8
_PASSAGE_FIELDS = tuple(f.name for f in fields(Passage))


# ---------------------------------------------------------------------- passages as records
def passage_record(passage: Passage) -> dict[str, Any]:
    """A passage as plain JSON for the run store (every field: expansion needs the section index)."""
    record = asdict(passage)
    record["score"] = float(passage.score)
    return record


def passage_from_record(record: Mapping[str, Any]) -> Passage:
    values = {name: record[name] for name in _PASSAGE_FIELDS if name in record}
    if "governance" in values:  # a record holds it as a plain mapping (`passage_record`)
        values["governance"] = Governance.from_mapping(values["governance"])
    return Passage(**values)


def passage_tokens(passages: Iterable[Passage]) -> int:
    return sum(count_tokens(p.text) for p in passages)


@dataclass(frozen=True)
class EvidenceSet:
    """What a reflection reads: the passages found so far (in the order synthesis numbers them), the
    catalog records of their documents, the tenant's term IDF (None: uniform), the asks of steps not
    yet run, and the run's meter for a model backend to charge its call to."""

    passages: tuple[Passage, ...]
    records: Mapping[str, DocumentRecord | None]
    idf: TermIdf | None = None
    pending: tuple[str, ...] = ()
    meter: TokenMeter | None = None
    today: str = ""  # ISO date that decides which effective dates are in force ("" = today)
    checks: tuple[CriterionCheck, ...] = ()  # a rule's criteria to settle for the case (criteria.py)
    searched: tuple[str, ...] = ()  # the search queries the run already made
    acted: tuple[str, ...] = ()  # the asks of steps whose tool acted successfully: done, not to be found

    def uncovered(self, parts: Sequence[str], min_coverage: float = DEFAULT_MIN_COVERAGE) -> list[str]:
        """The checklist parts no passage covers, less those a tool step already did."""
        return [p for p in uncovered_parts(parts, self.passages, self.idf, min_coverage) if p not in self.acted]

    def unsettled(self) -> list[CriterionCheck]:
        """The criteria checks no passage settles yet."""
        return open_checks(self.checks, self.passages, self.idf or UNIFORM_IDF)


# ---------------------------------------------------------------------- coverage
def best_coverage(part: str, passages: Sequence[Passage], idf: TermIdf | None) -> tuple[float, set[str]]:
    """(IDF-weighted share of the part's terms the best single passage holds, the terms it lacks)."""
    terms = set(content_terms(part))
    if not terms:
        return 1.0, set()
    weights = idf or UNIFORM_IDF
    best, missing = 0.0, set(terms)
    for passage in passages:
        covered = passage_terms(passage)
        score = weighted_coverage(terms, covered, weights)
        if score > best:
            best, missing = score, terms - covered
    return best, missing


def uncovered_parts(parts: Sequence[str], passages: Sequence[Passage], idf: TermIdf | None,
                    min_coverage: float = DEFAULT_MIN_COVERAGE) -> list[str]:
    """The checklist parts no passage covers: what the run is missing."""
    return [part for part in parts if best_coverage(part, passages, idf)[0] < min_coverage]


def distinct_parts(parts: Sequence[str]) -> list[str]:
    """The parts less those whose terms an earlier part already names ("kayak rental allowance" after
    "what is the kayak rental allowance")."""
    kept: list[tuple[str, set[str]]] = []
    for part in parts:
        terms = set(content_terms(part))
        if not any(terms <= earlier for _, earlier in kept):
            kept.append((part, terms))
    return [part for part, _ in kept]


def on_topic(parts: Sequence[str], passages: Sequence[Passage], idf: TermIdf | None,
             min_coverage: float = DEFAULT_MIN_COVERAGE) -> list[Passage]:
    """The passages that cover some part of the checklist: conflicts among the others are noise
    (an old edition found for another question is not a conflict about this one)."""
    return [p for p in passages if any(best_coverage(part, [p], idf)[0] >= min_coverage for part in parts)]


def missing_words(part: str, passages: Sequence[Passage], idf: TermIdf | None) -> str:
    """The part's own content words that its best passage lacks, in order: a query for what is still
    missing, without the words already found or the question's scaffolding (the part itself when
    nothing is missing)."""
    _, missing = best_coverage(part, passages, idf)
    words = list(dict.fromkeys(w for w in words_of(part) if w not in STOPWORDS and stem(w) in missing))
    return " ".join(words) if words else part


def skip_reflection(question: str, parts: Sequence[str], passages: Sequence[Passage],
                    idf: TermIdf | None) -> bool:
    """True when the top passages score high on every part and, together, hold every term of the
    question: a reflection could only say "finish"."""
    top = sorted(passages, key=lambda p: -p.score)[:SKIP_RULE_PASSAGES]
    if not top:
        return False
    held = set().union(*(passage_terms(p) for p in top))
    if not set(content_terms(question)) <= held:
        return False
    return all(best_coverage(part, top, idf)[0] >= HIGH_COVERAGE for part in parts or [question])


def gathered(step_records: Sequence[tuple[Any, Mapping[str, Any]]]) -> list[Passage]:
    """The passages of the successful steps, taken in turn from each step (best first within a
    step) so every sub-question is represented among the first sources; each chunk once."""
    lists = [[passage_from_record(p) for p in record.get("passages", [])]
             for _, record in step_records if succeeded(record)]
    seen: set[str] = set()
    passages: list[Passage] = []
    for rank in range(max((len(ps) for ps in lists), default=0)):
        for ps in lists:
            if rank < len(ps) and ps[rank].chunk_id not in seen:
                seen.add(ps[rank].chunk_id)
                passages.append(ps[rank])
    return passages


class RunEvidence:
    """A run's evidence as reflection and synthesis read it (`state`: the drive's RunState,
    citadel/agent/journal.py): the passages its steps found (or, after a reviewer corrected the
    sources, what `refreshed(state)` found again), the catalog records of their documents and of the
    versions they retired, the term weights of the tenant's partition, and the criteria to settle.
    `earlier_questions(state)`: the user's earlier questions (a case named before); `today`: the ISO
    date deciding which effective dates are in force."""

    def __init__(self, catalog, partitions, refreshed: Callable[[Any], list],
                 earlier_questions: Callable[[Any], tuple[str, ...]], today: Callable[[], str]):
        self.catalog = catalog
        self.partitions = partitions
        self.refreshed = refreshed
        self.earlier_questions = earlier_questions
        self.today = today

    def of(self, state, pending: bool = True) -> EvidenceSet:
        """The run's evidence now; `pending`: with the asks of the steps still to run."""
        steps = state.step_records()
        passages = gathered(self.refreshed(state) or steps)
        partition = self.partitions.get(state.principal.tenant_id)
        searched = tuple(str(s.args.get("query", s.ask)) for s, _ in steps if s.tool == SEARCH)
        acted = tuple(s.ask for s, r in steps if s.tool != SEARCH and succeeded(r))
        checks = tuple(criteria_checks(state.run.question, passages, self.earlier_questions(state)))
        return EvidenceSet(tuple(passages), self.documents(state.principal, passages),
                           term_idf(partition) if partition is not None else None,
                           tuple(s.ask for s in state.pending()) if pending else (),
                           state.meter, self.today(), checks, searched, acted)

    def documents(self, principal, passages: Sequence[Passage]) -> dict[str, DocumentRecord | None]:
        """The catalog records of the passages' documents, and of the versions they retired (never in
        the evidence: retired at publish) where the user's groups could read them, so a conflict is
        reported from the catalog's metadata."""
        tenant = principal.tenant_id
        records = {d: self.catalog.get_document(tenant, d) for d in sorted({p.document_id for p in passages})}
        for older in sorted(predecessor_ids(records)):
            record = self.catalog.get_document(tenant, older)
            if record is not None and principal.groups & set(record.groups):
                records[older] = record
        return records
