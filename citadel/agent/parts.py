"""Which parts of a run's checklist are confirmed, and what the answer says of the others (DESIGN.md
§4 step 6 and §10).

A run ends the way a single-shot answer does: it asserts a part only when the reader confirms the
fact that part asks for (citadel/answer/confirm.py, the same rule as `ask`); a part it cannot
confirm is named, with the closest sentence it found quoted and cited, and nothing is asserted about
it. Without a reader the lexical coverage rule of evidence.py decides instead (and this module is not
used). Each part is read in its context — with the statements that lead up to it in the question
("I got a jury summons. Do those days come out of my vacation balance?") — and confirmed from a few
passages only: those its own searches found first (the part's and its situation's, reranked by the
reader when one is configured), then the run's other passages that hold most of its words; they are
expanded to sections as synthesis expands them, so the closest sentence cites the same section the
answer's sources number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from citadel.agent.evidence import UNIFORM_IDF, best_coverage
from citadel.answer.confirm import ConfirmSettings, confirm
from citadel.answer.gate import TermIdf
from citadel.prompting.source import Source
from citadel.reviews.evidence import MAX_EVIDENCE_QUOTE_CHARS
from citadel.types import Passage

# A part is confirmed from at most this many passages (the reader reads the sentences of the first
# few sources only: citadel/answer/quote.py READ_SOURCES), which keeps a run's confirmation cheap.
CONFIRM_PASSAGES = 4
# The sentence that starts each unconfirmed part's note (a caller can tell the note from the answer).
UNCONFIRMED = "The documents I can see don't confirm"
OFFER = "If you need this confirmed, I can put you in touch with a person."
# What joins a part to the one before it ("? Also, ", " and "), dropped from the front of its context
# (plain string checks: no pattern runs on the question here).
JOIN_PUNCTUATION = " \t\n?.!;,:"
JOIN_WORDS = ("and also", "also", "as well as", "in addition", "additionally", "and")
# A part's context is cut to this many characters (the reader reads at most 512 of a question).
MAX_CONTEXT_CHARS = 1_000
# Words a part may start with that read lower-case inside a sentence.
LOWER_FIRST_WORDS = frozenset(
    "who whom whose what when where why how which whether is are was were can could do does did should must "
    "may will would has have the a an its their our my any if".split())


@dataclass(frozen=True)
class PartCheck:
    """One checklist part: whether its asked fact is confirmed, and its closest evidence (the
    sentence the reader scored best and the source it is in; None when nothing was read) with the
    share of the part's subject it names (with its heading and title: `slots.subject_share`)."""

    part: str
    confirmed: bool
    quote: str | None = None
    source: Source | None = None
    subject_share: float = 0.0

    @property
    def closest(self) -> bool:
        return self.source is not None


def in_context(question: str, parts: Sequence[str]) -> dict[str, str]:
    """Each part with what leads up to it in the question: the statements since the part before
    ("I got a jury summons for next month. Do those days come out of my vacation balance"), so the
    part is confirmed about the situation it asks of, not just its own words ("those days"). A part
    not found in the question (a model planner's wording, a re-plan's gap) is its own context."""
    lowered, found = question.lower(), []
    if len(lowered) != len(question):  # a letter whose lower case is longer: positions would not match
        return {part: part for part in parts}
    for part in parts:
        at = lowered.find(part.lower()) if part.strip() else -1
        if at >= 0:
            found.append((at, at + len(part), part))
    contexts, start = {part: part for part in parts}, 0
    for at, end, part in sorted(found):
        if at >= start:
            text = without_join(question[start:end])
            contexts[part] = text[-MAX_CONTEXT_CHARS:] or part
            start = end
    return contexts


def without_join(text: str) -> str:
    """The text less the punctuation and joining word it starts with ("? Also, I'm …" → "I'm …")."""
    text = text.lstrip(JOIN_PUNCTUATION)
    lowered = text.lower()
    for word in JOIN_WORDS:
        if lowered.startswith(word) and (len(text) == len(word) or not text[len(word)].isalnum()):
            return text[len(word):].lstrip(JOIN_PUNCTUATION).strip()
    return text.strip()


def part_passages(part: str, passages: Sequence[Passage], idf: TermIdf | None, own: Sequence[Sequence[str]] = (),
                  most: int = CONFIRM_PASSAGES) -> list[Passage]:
    """The passages a part is confirmed from: those its own searches found (`own`: each search's
    chunk ids, best first; taken in turn, so the situation's search and the question's both count),
    then the others by the share of the part's terms each holds (ties keep the evidence order); each
    chunk once, at most `most`."""
    by_id = {p.chunk_id: p for p in passages}
    turns = [c for rank in range(max(map(len, own), default=0)) for ids in own if rank < len(ids) for c in [ids[rank]]]
    first = [by_id[c] for c in dict.fromkeys(turns) if c in by_id]
    taken = {p.chunk_id for p in first}
    rest = sorted((p for p in passages if p.chunk_id not in taken),
                  key=lambda p: -best_coverage(part, [p], idf or UNIFORM_IDF)[0])
    return (first + rest)[:most]


def check_part(reader, part: str, sources: Sequence[Source], settings: ConfirmSettings,
               asked: str | None = None, gate_passed: bool = False) -> PartCheck:
    """Confirm one part (as `asked`: the part in its context) from its passages expanded to numbered
    sections. A reader error propagates (the caller confirms nothing then, and cites the first
    section as the closest)."""
    if not sources:
        return PartCheck(part, False)
    confirmation = confirm(reader, asked or part, sources, settings, gate_passed)
    best = confirmation.best
    if best is None:
        return PartCheck(part, confirmation.confirmed, None, sources[0])
    source = next((s for s in sources if s.number == best.source_number), None)
    return PartCheck(part, confirmation.confirmed, bounded_quote(best.text), source, best.subject_share)


def on_topic_parts(checks: Sequence[PartCheck], min_share: float) -> list[PartCheck]:
    """The parts whose closest sentence names at least `min_share` of what they are about: the run
    found their topic, if not the fact (the single-shot path's `topic_coverage`, read per sentence)."""
    return [c for c in checks if c.quote is not None and c.subject_share >= min_share]


def bounded_quote(text: str) -> str:
    """The sentence on one line, cut to length, its brackets made parentheses (a "[3]" in a document
    must not read as one of the answer's citation markers)."""
    text = " ".join(text.split()).replace("[", "(").replace("]", ")")
    return text if len(text) <= MAX_EVIDENCE_QUOTE_CHARS else text[:MAX_EVIDENCE_QUOTE_CHARS - 1] + "…"


def asked_text(parts: Sequence[str]) -> str:
    """The confirmed parts (in their context) as the question synthesis answers, each asked as a
    question."""
    return " ".join(p.strip().rstrip("?.!; ") + "?" for p in parts if p.strip())


def citation_number(citations: list[dict], citation: Mapping) -> int:
    """The answer's number of the section `citation` names: the number of a citation of the same
    section (same document, version and heading), else a new one appended to `citations`."""
    for number, cited in enumerate(citations, start=1):
        if cited.get("chunk_id") == citation.get("chunk_id") or all(
                cited.get(k) == citation.get(k) for k in ("document_id", "version", "heading")):
            return number
    citations.append(dict(citation))
    return len(citations)


def unconfirmed_note(checks: Sequence[PartCheck], citations: list[dict], extra: Sequence[str] = ()) -> str:
    """One sentence per part not confirmed (and per `extra` ask, e.g. a criterion no passage
    settles), each quoting its closest evidence with a marker that is a citation of the answer:
    `citations` (the answer's, in order) gains the sections not cited yet, numbered after them."""
    sentences = []
    for check in checks:
        if check.confirmed:
            continue
        sentence = f"{UNCONFIRMED} {_phrase(check.part)}."
        if check.source is not None:
            number = citation_number(citations, check.source.citation())
            sentence += f' The closest is: "{check.quote}" [{number}].' if check.quote else \
                f" The closest section is [{number}]."
        sentences.append(sentence)
    sentences += [f"{UNCONFIRMED} {_phrase(ask)}." for ask in extra]
    return " ".join(sentences)


def _phrase(part: str) -> str:
    """The part as a clause inside a sentence, no trailing punctuation: a leading question or
    function word lower-cased ("Who approves …" → "who approves …"), any other word (a name, "I")
    kept as written."""
    part = part.strip().rstrip("?.!;: ")
    first, _, rest = part.partition(" ")
    if first.lower() in LOWER_FIRST_WORDS:
        part = " ".join(filter(None, (first.lower(), rest)))
    return part
