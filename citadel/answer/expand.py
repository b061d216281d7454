"""Parent-section expansion (DESIGN.md §4 step 4): search over chunks, generate from sections.

A chunk is sized for retrieval, not for answering: the sentence that qualifies a rule ("except for
contractors") is often in the next chunk of the same section. Each retrieved passage is therefore
replaced by its whole section (every chunk of the same document version and section, in ordinal
order, the overlap between consecutive chunks removed), trimmed to a per-source token budget
around the hit. Sources are numbered strongest first; the list stops at `max_sources` or when the
total budget is spent. A section only appears once, under the number of its strongest passage.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from citadel import regex
from citadel.answer.gate import passage_terms
from citadel.chunking import TOKEN, count_tokens
from citadel.segments.partition import Partition, SegmentCache
from citadel.types import Passage

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


@dataclass(frozen=True)
class Source:
    """One numbered source handed to the generator: the hit passage and its expanded section."""

    number: int
    passage: Passage
    text: str
    tokens: int

    def citation(self) -> dict:
        p = self.passage
        return {"chunk_id": p.chunk_id, "document_id": p.document_id, "title": p.title,
                "version": p.version, "heading": p.heading, "page": p.page, "source": p.source}


def source_terms(source: Source) -> set[str]:
    """Terms of an expanded source with its heading and document name, as the gate reads a passage."""
    return passage_terms(replace(source.passage, text=source.text))


class PartitionLayout:
    """Row lookups of one immutable segment: chunk id → row, section → rows in ordinal order."""

    def __init__(self, partition: Partition):
        table = partition.table
        chunk_ids = table.column("chunk_id").to_pylist()
        keys = zip(table.column("document_id").to_pylist(), table.column("version").to_pylist(),
                   table.column("section_index").to_pylist())
        ordinals = table.column("ordinal").to_pylist()
        self.texts = table.column("text").to_pylist()
        self.row_of_chunk = {chunk_id: row for row, chunk_id in enumerate(chunk_ids)}
        sections: dict[tuple[str, int, int], list[int]] = {}
        for row, key in enumerate(keys):
            sections.setdefault(key, []).append(row)
        self.sections = {key: sorted(rows, key=ordinals.__getitem__) for key, rows in sections.items()}

    def section_rows(self, passage: Passage) -> list[int]:
        key = (passage.document_id, passage.version, passage.section_index)
        return self.sections.get(key, [self.row_of_chunk[passage.chunk_id]])


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


def trim_to_tokens(text: str, budget: int) -> str:
    """The longest prefix of `text` with at most `budget` tokens (same estimate as chunking)."""
    if budget <= 0:
        return ""
    for count, match in enumerate(TOKEN.finditer(text), start=1):
        if count == budget:
            return text[: match.end()]
    return text


def trim_tail_to_tokens(text: str, budget: int) -> str:
    """The longest suffix of `text` with at most `budget` tokens."""
    if budget <= 0:
        return ""
    matches = list(TOKEN.finditer(text))
    if len(matches) <= budget:
        return text
    return text[matches[len(matches) - budget].start():]


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


class SectionExpander:
    def __init__(self, budget: ExpansionBudget | None = None):
        self.budget = budget or ExpansionBudget()

    def expand(self, passages: Sequence[Passage], partition: Partition | None) -> list[Source]:
        """Numbered sources, strongest passage first, each its section within the budgets."""
        layout = layout_of(partition) if partition is not None else None
        sources: list[Source] = []
        seen_sections: set[tuple[str, int, int]] = set()
        remaining = self.budget.total_tokens
        for passage in passages:
            if len(sources) >= self.budget.max_sources or remaining < MIN_SOURCE_TOKENS:
                break
            section = (passage.document_id, passage.version, passage.section_index)
            if section in seen_sections:
                continue
            seen_sections.add(section)
            text = self._section_text(passage, layout, min(self.budget.source_tokens, remaining))
            tokens = count_tokens(text)
            remaining -= tokens
            sources.append(Source(len(sources) + 1, passage, text, tokens))
        return sources

    @staticmethod
    def _section_text(passage: Passage, layout: PartitionLayout | None, budget: int) -> str:
        if layout is None or passage.chunk_id not in layout.row_of_chunk:
            return trim_to_tokens(passage.text, budget)
        rows = layout.section_rows(passage)
        hit = rows.index(layout.row_of_chunk[passage.chunk_id])
        return section_window([layout.texts[r] for r in rows], hit, budget)
