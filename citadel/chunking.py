"""Chunking (DESIGN.md §3): located, ~max_tokens chunks with overlap only inside a section.

Each chunk belongs to exactly one section, so its heading path and page are exact. Tables and code
blocks are never split; a text block too long for a chunk is split at sentence boundaries, then
lines, then words. A continued section's next chunk repeats the tail of the previous one
(whole sentences where possible) so that a fact cut at a boundary is still retrievable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

from citadel.errors import ParseError
from citadel.types import Block, Chunk, ParsedDocument, Section, content_hash, make_chunk_id

DEFAULT_MAX_TOKENS = 400
DEFAULT_OVERLAP_TOKENS = 50
# Words (letters/digits/underscore runs) and single punctuation marks, roughly how a WordPiece
# tokenizer counts ordinary prose; rare words would split further, so this slightly undercounts.
TOKEN = re.compile(r"\w+|[^\w\s]")
# Split levels for an over-long text block, coarsest first. Each pattern matches the separator
# between two pieces; the last level cuts between tokens when a single "word" is too long.
SENTENCE_BREAK = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+")
LINE_BREAK = re.compile(r"\n+")
WORD_BREAK = re.compile(r"\s+")
BLOCK_SEPARATOR = "\n\n"
ATOMIC_KINDS = frozenset({"table", "code"})


def count_tokens(text: str) -> int:
    """Cheap token estimate: words and punctuation marks, no model."""
    return sum(1 for _ in TOKEN.finditer(text))


@dataclass(frozen=True)
class _Unit:
    """A piece that is packed whole: a block, or one piece of a split text block."""

    kind: str
    text: str
    tokens: int


def chunk_document(
    parsed: ParsedDocument,
    *,
    tenant_id: str,
    document_id: str,
    version: int,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
    title_override: str | None = None,
) -> list[Chunk]:
    """Chunks of every section, in reading order, with stable ids `tenant:doc:vN:NNNN`."""
    if max_tokens <= 0 or not 0 <= overlap_tokens < max_tokens:
        raise ValueError(f"need max_tokens > overlap_tokens >= 0, got {max_tokens}, {overlap_tokens}")
    title = title_override or parsed.title or PurePath(parsed.source).stem
    chunks: list[Chunk] = []
    for section_index, section in enumerate(parsed.sections):
        heading_path = section.heading_path or ((title,) if title else ())
        if not heading_path and section.page is None:
            raise ParseError(
                f"{parsed.source}: section {section_index} has no heading, page or title to cite",
                code="no_location",
            )
        for text in chunk_section_texts(section, max_tokens, overlap_tokens):
            ordinal = len(chunks)
            chunks.append(
                Chunk(
                    chunk_id=make_chunk_id(tenant_id, document_id, version, ordinal),
                    tenant_id=tenant_id,
                    document_id=document_id,
                    version=version,
                    ordinal=ordinal,
                    title=title,
                    heading_path=heading_path,
                    page=section.page,
                    text=text,
                    context_header=context_header(title, heading_path, section.page),
                    content_hash=content_hash(text),
                    source=parsed.source,
                    section_index=section_index,
                )
            )
    return chunks


def context_header(title: str, heading_path: tuple[str, ...], page: int | None) -> str:
    """`Title > Heading > Sub (page N)`, embedded before the chunk text. A path that already
    starts with the title (an H1 equal to it, or a PDF page) does not repeat it."""
    parts = list(heading_path)
    if title and (not parts or parts[0] != title):
        parts.insert(0, title)
    header = " > ".join(parts)
    return f"{header} (page {page})" if page is not None else header


def chunk_section_texts(section: Section, max_tokens: int, overlap_tokens: int) -> list[str]:
    """The texts of one section's chunks. Overlap never crosses into another section because
    it is only ever taken from the previous chunk of this same call."""
    # Text pieces leave room for the overlap so a continued chunk still fits in max_tokens.
    text_budget = max_tokens - overlap_tokens
    units = [unit for block in section.blocks for unit in _block_units(block, text_budget)]
    chunks: list[list[_Unit]] = []
    current: list[_Unit] = []
    for unit in units:
        if current and _tokens(current) + unit.tokens > max_tokens:
            chunks.append(current)
            current = _start_with_overlap(current, unit, max_tokens, overlap_tokens)
        current.append(unit)
    if current:
        chunks.append(current)
    texts = [BLOCK_SEPARATOR.join(unit.text for unit in chunk).strip() for chunk in chunks]
    return [text for text in texts if text]


def _block_units(block: Block, text_budget: int) -> list[_Unit]:
    if not block.text.strip():
        return []
    tokens = count_tokens(block.text)
    if block.kind in ATOMIC_KINDS:
        return [_Unit(block.kind, block.text, tokens)]  # whole, even when oversized
    if tokens <= text_budget:
        return [_Unit("text", block.text, tokens)]
    return [_Unit("text", piece, count_tokens(piece)) for piece in split_text(block.text, text_budget)]


def _tokens(units: list[_Unit]) -> int:
    return sum(unit.tokens for unit in units)


def _start_with_overlap(
    previous: list[_Unit], next_unit: _Unit, max_tokens: int, overlap_tokens: int
) -> list[_Unit]:
    """Begin the next chunk with the tail of the previous one, when it has a text tail and the
    overlap still fits beside the next unit (an oversized table gets no overlap)."""
    tail = overlap_tail(previous, overlap_tokens)
    if not tail:
        return []
    tail_tokens = count_tokens(tail)
    if tail_tokens + next_unit.tokens > max_tokens:
        return []
    return [_Unit("text", tail, tail_tokens)]


def overlap_tail(units: list[_Unit], overlap_tokens: int) -> str:
    """The last ~overlap_tokens tokens of the trailing text units: whole sentences when the last
    sentence fits, else trailing words. A trailing table or code block gives no overlap: repeating
    part of one would be a split table, repeating all of it would duplicate it."""
    trailing_text: list[str] = []
    for unit in reversed(units):
        if unit.kind in ATOMIC_KINDS:
            break
        trailing_text.insert(0, unit.text)
    if overlap_tokens == 0 or not trailing_text:
        return ""
    text = BLOCK_SEPARATOR.join(trailing_text)
    for pattern in (SENTENCE_BREAK, WORD_BREAK):
        tail = _trailing_pieces(text, pattern, overlap_tokens)
        if tail:
            return tail
    return ""


def _trailing_pieces(text: str, separator: re.Pattern[str], budget: int) -> str:
    """The longest suffix of whole pieces (cut at `separator`) within `budget` tokens."""
    starts = [0] + [match.end() for match in separator.finditer(text)]
    best = ""
    for start in reversed(starts):
        candidate = text[start:].strip()
        if count_tokens(candidate) > budget:
            break
        best = candidate
    return best


def split_text(text: str, budget: int) -> list[str]:
    """Split text into pieces of at most `budget` tokens at the coarsest boundaries that work:
    sentences, then lines, then words, then tokens. Pieces are slices of the original text, so
    line breaks inside a piece survive."""
    spans = _split_span(text, (0, len(text)), budget, level=0)
    return [piece for start, end in spans if (piece := text[start:end].strip())]


_SPLIT_LEVELS = (SENTENCE_BREAK, LINE_BREAK, WORD_BREAK)
Span = tuple[int, int]


def _split_span(text: str, span: Span, budget: int, level: int) -> list[Span]:
    if count_tokens(text[span[0] : span[1]]) <= budget:
        return [span]
    if level == len(_SPLIT_LEVELS):
        return _token_spans(text, span, budget)
    pieces: list[Span] = []
    for segment in _segment_spans(text, span, _SPLIT_LEVELS[level]):
        pieces.extend(_split_span(text, segment, budget, level + 1))
    return _pack_spans(text, pieces, budget)


def _segment_spans(text: str, span: Span, separator: re.Pattern[str]) -> list[Span]:
    """Contiguous spans covering `span`, cut after each separator (so cuts fall between tokens
    and token counts of adjacent spans add up)."""
    start, end = span
    cuts = [start] + [m.end() for m in separator.finditer(text, start, end) if m.end() < end] + [end]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def _pack_spans(text: str, spans: list[Span], budget: int) -> list[Span]:
    """Greedily merge adjacent spans while the merged span stays within the budget."""
    packed: list[Span] = []
    current: Span | None = None
    current_tokens = 0
    for span in spans:
        tokens = count_tokens(text[span[0] : span[1]])
        if current is not None and current_tokens + tokens <= budget:
            current, current_tokens = (current[0], span[1]), current_tokens + tokens
            continue
        if current is not None:
            packed.append(current)
        current, current_tokens = span, tokens
    if current is not None:
        packed.append(current)
    return packed


def _token_spans(text: str, span: Span, budget: int) -> list[Span]:
    """Last resort for a run with no whitespace longer than the budget (a huge URL or blob)."""
    starts = [match.start() for match in TOKEN.finditer(text, span[0], span[1])]
    cuts = [span[0]] + starts[budget::budget] + [span[1]]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]
