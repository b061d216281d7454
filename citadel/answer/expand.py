"""Parent-section expansion (DESIGN.md §4 step 4): search over chunks, generate from sections.

A chunk is sized for retrieval, not for answering: the sentence that qualifies a rule ("except for
contractors") is often in the next chunk of the same section. Each retrieved passage is therefore
replaced by its whole section (every chunk of the same document version and section, in ordinal
order, the overlap between consecutive chunks removed), trimmed to a per-source token budget
around the hit. Sources are numbered strongest first; the list stops at `max_sources` or when the
total budget is spent. A section only appears once, under the number of its strongest passage.

A hit in a sub-section brings its parent section (DESIGN.md §4 step 4): when 3.2 matched, the rule
it states is often qualified by its siblings (3.1 Scope says whom it covers, 3.3 Discount what it
grants), so the parent section is handed over — the parent's own text and every section under its
heading, each as its own numbered source (so an answer cites 3.3 as 3.3). The retrieved sections
come first and keep their ranks (a sibling numbered ahead of the hit would outrank it, and siblings
must not crowd out the other documents the ranking found: on the regression set that cost three
correct citations); the siblings follow, numbered after every retrieved section, each parent's in
document order. They come whole or not at all, nearest the hit first (after it, then before),
while the per-source, per-parent and total budgets and the source cap allow, so the part handed
over is contiguous around the hit. They are the same document version as the hit, which the live
check has just passed. A parent that is the document itself (a top-level heading, the title's H1,
or a heading over every section) is not expanded: that would be the whole document, not a section.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Sequence

from citadel import regex
from citadel.answer.gate import passage_terms
from citadel.chunking import count_tokens, trim_tail_to_tokens, trim_to_tokens
from citadel.prompting.source import Source
from citadel.segments.partition import Partition, SegmentCache
from citadel.types import GOVERNANCE_FIELDS, HEADING_SEPARATOR, Governance, Passage

# A source whose remaining budget is below this is not worth a number: it would be a fragment.
MIN_SOURCE_TOKENS = 40
# Consecutive chunks overlap by whole trailing sentences; an overlap shorter than this many
# characters is treated as coincidence and kept.
MIN_OVERLAP_CHARS = 20
# Pieces of one section are joined as paragraphs, as chunking joined its blocks.
PARAGRAPH = "\n\n"
EXCESS_BLANK_LINES = regex.compile("answer.expand.excess_blank_lines", r"\n\s*\n\s*\n+")
# Layouts (row lookups) kept for this many loaded segments.
LAYOUT_CACHE_SEGMENTS = 16

SectionKey = tuple[str, int, int]  # (document id, version, section index)


def source_terms(source: Source) -> set[str]:
    """Terms of an expanded source with its heading and document name, as the gate reads a passage."""
    return passage_terms(replace(source.passage, text=source.text))


class PartitionLayout:
    """Row lookups of one immutable segment: chunk id → row, section → rows in ordinal order, and
    each document version's sections with their headings in document order (for the parent)."""

    def __init__(self, partition: Partition):
        table = partition.table
        self._table = table  # other columns are read per row, only for the sections expansion hands over
        chunk_ids = table.column("chunk_id").to_pylist()
        keys = zip(table.column("document_id").to_pylist(), table.column("version").to_pylist(),
                   table.column("section_index").to_pylist())
        ordinals = table.column("ordinal").to_pylist()
        self.texts = table.column("text").to_pylist()
        self.row_of_chunk = {chunk_id: row for row, chunk_id in enumerate(chunk_ids)}
        sections: dict[SectionKey, list[int]] = {}
        for row, key in enumerate(keys):
            sections.setdefault(key, []).append(row)
        self.sections = {key: sorted(rows, key=ordinals.__getitem__) for key, rows in sections.items()}
        documents: dict[tuple[str, int], list[int]] = {}
        for document_id, version, section_index in self.sections:
            documents.setdefault((document_id, version), []).append(section_index)
        self.document_sections = {key: sorted(indexes) for key, indexes in documents.items()}

    def section_rows(self, passage: Passage) -> list[int]:
        key = (passage.document_id, passage.version, passage.section_index)
        return self.sections.get(key, [self.row_of_chunk[passage.chunk_id]])

    def _cell(self, column: str, row: int):
        return self._table.column(column)[row].as_py()

    def heading_of(self, key: SectionKey) -> str:
        return self._cell("heading", self.sections[key][0])

    def section_text(self, key: SectionKey) -> str:
        """The whole section: its chunks in order, the overlap between consecutive ones removed."""
        rows = self.sections[key]
        return section_window([self.texts[r] for r in rows], 0, sum(count_tokens(self.texts[r]) for r in rows))

    def section_passage(self, key: SectionKey, score: float) -> Passage:
        """A section as a passage (its first chunk), to number and cite it like a retrieved one."""
        row = self.sections[key][0]
        cell = functools.partial(self._cell, row=row)
        return Passage(cell("chunk_id"), self.texts[row], key[0], cell("title"), key[1], cell("heading"), cell("page"),
                       cell("source"), score, key[2],
                       governance=Governance.from_mapping({name: cell(name) for name in GOVERNANCE_FIELDS}))

    def parent_family(self, passage: Passage) -> list[int]:
        """Section indexes of the hit's parent section (its own text and everything under its
        heading), in document order; [] when the hit has no parent short of the whole document."""
        parent = parent_heading(passage.heading, passage.title)
        indexes = self.document_sections.get((passage.document_id, passage.version), [])
        if parent is None or passage.section_index not in indexes:
            return []
        family = [i for i in indexes
                  if under_heading(self.heading_of((passage.document_id, passage.version, i)), parent)]
        return [] if len(family) == len(indexes) else family


def parent_heading(heading: str, title: str) -> str | None:
    """The heading path one level up, or None when that is the document: a top-level heading has
    no parent, and an H1 equal to the title heads the whole document."""
    if HEADING_SEPARATOR not in heading:
        return None
    parent = heading.rsplit(HEADING_SEPARATOR, 1)[0]
    return None if parent == title else parent


def under_heading(heading: str, parent: str) -> bool:
    """The section is the parent itself or lies anywhere beneath it."""
    return heading == parent or heading.startswith(parent + HEADING_SEPARATOR)


_layouts: SegmentCache[PartitionLayout] = SegmentCache(LAYOUT_CACHE_SEGMENTS)


def layout_of(partition: Partition) -> PartitionLayout:
    """The cached layout of a segment (segments are immutable, so the segment id is the key)."""
    return _layouts.get(partition.segment_id, lambda: PartitionLayout(partition))


def overlap_chars(previous: str, following: str) -> int:
    """Length of the prefix of `following` that repeats the end of `previous` (the chunk overlap)."""
    probe = following[:MIN_OVERLAP_CHARS]
    if len(probe) < MIN_OVERLAP_CHARS:
        return 0
    start = previous.find(probe)
    while start != -1:
        tail = previous[start:]
        if following.startswith(tail):
            return len(tail)
        start = previous.find(probe, start + 1)
    return 0


def section_window(texts: list[str], hit: int, budget: int) -> str:
    """The hit chunk plus its neighbours, alternately after then before, within `budget` tokens.

    Later text usually continues the hit (exceptions and conditions follow the rule), so the
    window grows forward first. Each neighbour contributes only what the hit's side does not
    already hold (the chunk overlap is removed); the last one added is cut to the room left,
    keeping the part nearest the hit.
    """
    pieces = [trim_to_tokens(texts[hit], budget)]
    # separators[i] goes between pieces[i] and pieces[i + 1]: nothing where an overlap was cut
    # (the two pieces are contiguous text), a paragraph break otherwise.
    separators: list[str] = []
    used = count_tokens(pieces[0])
    before, after, forward = hit - 1, hit + 1, True
    while used < budget and (before >= 0 or after < len(texts)):
        room = budget - used
        if (forward and after < len(texts)) or before < 0:
            overlap = overlap_chars(texts[after - 1], texts[after])
            piece = trim_to_tokens(texts[after][overlap:], room)
            pieces.append(piece)
            separators.append("" if overlap else PARAGRAPH)
            after += 1
        else:
            overlap = overlap_chars(texts[before], texts[before + 1])
            piece = trim_tail_to_tokens(texts[before][: len(texts[before]) - overlap], room)
            pieces.insert(0, piece)
            separators.insert(0, "" if overlap else PARAGRAPH)
            before -= 1
        used += count_tokens(piece)
        forward = not forward
    joined = pieces[0] + "".join(sep + piece for sep, piece in zip(separators, pieces[1:]))
    return EXCESS_BLANK_LINES.sub(PARAGRAPH, joined).strip()


@dataclass(frozen=True)
class ExpansionBudget:
    max_sources: int = 8
    source_tokens: int = 600
    total_tokens: int = 3000
    # One parent section (the hit's section and its siblings together) takes at most this much.
    parent_tokens: int = 1200
    parent_sections: bool = True


@dataclass
class _Room:
    """What one expansion may still spend: tokens over all sources, and source numbers."""

    tokens: int
    slots: int


class SectionExpander:
    def __init__(self, budget: ExpansionBudget | None = None):
        self.budget = budget or ExpansionBudget()

    def expand(self, passages: Sequence[Passage], partition: Partition | None) -> list[Source]:
        """Numbered sources: each retrieved passage's section, strongest first, within the budgets;
        then, while room is left, the siblings under each hit's parent heading, in document order."""
        layout = layout_of(partition) if partition is not None else None
        seen_sections: set[SectionKey] = set()
        room = _Room(self.budget.total_tokens, self.budget.max_sources)
        hits: list[tuple[Passage, str, int]] = []
        for passage in passages:
            if room.slots <= 0 or room.tokens < MIN_SOURCE_TOKENS:
                break
            section = (passage.document_id, passage.version, passage.section_index)
            if section in seen_sections:
                continue
            seen_sections.add(section)
            text = self._section_text(passage, layout, min(self.budget.source_tokens, room.tokens))
            tokens = count_tokens(text)
            room.tokens, room.slots = room.tokens - tokens, room.slots - 1
            hits.append((passage, text, tokens))
        chosen = list(hits)
        if self.budget.parent_sections and layout is not None:
            for passage, _, tokens in hits:
                siblings = self._siblings(passage, layout, seen_sections, room, self.budget.parent_tokens - tokens)
                chosen.extend(sorted(siblings, key=lambda s: s[0].section_index))
        return [Source(number, passage, text, tokens) for number, (passage, text, tokens) in enumerate(chosen, 1)]

    def _siblings(self, passage: Passage, layout: PartitionLayout, seen: set[SectionKey], room: _Room,
                  parent_room: int) -> list[tuple[Passage, str, int]]:
        """Whole sections under the hit's parent, nearest first (after, then before), each direction
        stopping at the first that does not fit, so the parent is handed over contiguously."""
        family = layout.parent_family(passage)
        if not family:
            return []
        at = family.index(passage.section_index)
        directions = [iter(family[at + 1:]), iter(reversed(family[:at]))]
        taken: list[tuple[Passage, str, int]] = []
        while directions and room.slots > 0:
            for direction in list(directions):
                index = next(direction, None)
                if index is None:
                    directions.remove(direction)
                    continue
                key = (passage.document_id, passage.version, index)
                if key in seen:
                    continue  # already handed over (an earlier hit or parent): still part of the run
                text = layout.section_text(key)
                tokens = count_tokens(text)
                if not text:
                    continue
                if room.slots <= 0 or tokens > min(self.budget.source_tokens, room.tokens, parent_room):
                    directions.remove(direction)
                    continue
                seen.add(key)
                taken.append((layout.section_passage(key, passage.score), text, tokens))
                room.tokens, room.slots, parent_room = room.tokens - tokens, room.slots - 1, parent_room - tokens
        return taken

    @staticmethod
    def _section_text(passage: Passage, layout: PartitionLayout | None, budget: int) -> str:
        if layout is None or passage.chunk_id not in layout.row_of_chunk:
            return trim_to_tokens(passage.text, budget)
        rows = layout.section_rows(passage)
        hit = rows.index(layout.row_of_chunk[passage.chunk_id])
        return section_window([layout.texts[r] for r in rows], hit, budget)
