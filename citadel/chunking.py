"""Chunking (DESIGN.md §3): located chunks sized to the embedding model's window, with overlap only
inside a section.

Each chunk belongs to exactly one section, so its heading path and page are exact. Sizes are counted
with the embedding model's own tokenizer (`count`), context header included: the embedded text
`header\\ntext` never exceeds `max_tokens`, so no chunk has a tail the model never reads. Tables and
code blocks are kept whole when they fit; one too big for a chunk is cut between rows (a table's
header row repeated on every piece), never truncated. A text block too long for a chunk is split at
sentence boundaries, then lines, then words. A continued section's next chunk repeats the tail of
the previous one (whole sentences where possible) so that a fact cut at a boundary is still
retrievable.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath

from citadel import regex
from citadel.errors import ParseError
from citadel.parsing.markdown import TABLE_SEPARATOR_ROW
from citadel.types import (HEADING_SEPARATOR, Block, Chunk, ParsedDocument, Section, content_hash, embed_text_for,
                           make_chunk_id)

DEFAULT_MAX_TOKENS = 400
DEFAULT_OVERLAP_TOKENS = 50
# A context header may take at most this share of a chunk's budget (1/4); a longer heading path is
# shortened so the chunk's own text keeps most of the window.
HEADER_SHARE = 4
HEADER_ELLIPSIS = " …"
# Words (letters/digits/underscore runs) and single punctuation marks, roughly how a WordPiece
# tokenizer counts ordinary prose; rare words would split further, so this slightly undercounts.
TOKEN = regex.compile("chunking.token", r"\w+|[^\w\s]")
# Split levels for an over-long text block, coarsest first. Each pattern matches the separator
# between two pieces; the last level cuts between tokens when a single "word" is too long.
# Whitespace after ".", "!" or "?" and any closing quotes or brackets; callers use only where a match
# ends, so the punctuation is matched rather than looked behind at (RE2).
SENTENCE_BREAK = regex.compile("chunking.sentence_break", r"[.!?][\"'”’)\]]*\s+")
LINE_BREAK = regex.compile("chunking.line_break", r"\n+")
WORD_BREAK = regex.compile("chunking.word_break", r"\s+")
BLOCK_SEPARATOR = "\n\n"
ATOMIC_KINDS = frozenset({"table", "code"})

TokenCount = Callable[[str], int]


def count_tokens(text: str) -> int:
    """Cheap token estimate: words and punctuation marks, no model."""
    return sum(1 for _ in TOKEN.finditer(text))


@dataclass(frozen=True)
class _Unit:
    """A piece that is packed whole: a block, or one piece of a split block."""

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
    count: TokenCount = count_tokens,
) -> list[Chunk]:
    """Chunks of every section, in reading order, with stable ids `tenant:doc:vN:NNNN`.

    `max_tokens` bounds each chunk's embedded text (context header, newline, text) as `count`
    measures it: pass the embedding model's window and its tokenizer (citadel.embedding).
    """
    if max_tokens <= 0 or not 0 <= overlap_tokens < max_tokens:
        raise ValueError(f"need max_tokens > overlap_tokens >= 0, got {max_tokens}, {overlap_tokens}")
    title = document_title(parsed, title_override)
    chunks: list[Chunk] = []
    for section_index, section in enumerate(parsed.sections):
        heading_path = section_heading_path(section, title)
        if not heading_path and section.page is None:
            raise ParseError(
                f"{parsed.source}: section {section_index} has no heading, page or title to cite",
                code="no_location",
            )
        header = fitted_header(context_header(title, heading_path, section.page), max_tokens // HEADER_SHARE, count)
        text_budget = max_tokens - count(header)
        # The overlap must leave room for new text in a continued chunk of this section.
        overlap = min(overlap_tokens, text_budget // 2)
        texts = chunk_section_texts(section, text_budget, overlap, count)
        for text in fit_to_window(texts, header, max_tokens, count):
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
                    context_header=header,
                    content_hash=content_hash(text),
                    source=parsed.source,
                    section_index=section_index,
                )
            )
    return chunks


def document_title(parsed: ParsedDocument, title_override: str | None = None) -> str:
    """The title chunks carry: the catalog's override, else the parsed title, else the file name."""
    return title_override or parsed.title or PurePath(parsed.source).stem


def section_heading_path(section: Section, title: str) -> tuple[str, ...]:
    """The heading path a section's chunks cite: its own, or the document's title when it has none."""
    return section.heading_path or ((title,) if title else ())


def context_header(title: str, heading_path: tuple[str, ...], page: int | None) -> str:
    """`Title > Heading > Sub (page N)`, embedded before the chunk text. A path that already
    starts with the title (an H1 equal to it, or a PDF page) does not repeat it."""
    parts = list(heading_path)
    if title and (not parts or parts[0] != title):
        parts.insert(0, title)
    header = HEADING_SEPARATOR.join(parts)
    return f"{header} (page {page})" if page is not None else header


def fitted_header(header: str, limit: int, count: TokenCount = count_tokens) -> str:
    """The header, or its longest word prefix within `limit` tokens plus an ellipsis when a heading
    path is absurdly long: the chunk's own text must keep most of the window."""
    if count(header) <= limit:
        return header
    words = header.split()
    low, high = 0, len(words)  # the longest prefix of `low` words that fits, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        if count(" ".join(words[:middle]) + HEADER_ELLIPSIS) <= limit:
            low = middle
        else:
            high = middle - 1
    return (" ".join(words[:low]) + HEADER_ELLIPSIS).strip()


def fit_to_window(texts: list[str], header: str, max_tokens: int, count: TokenCount = count_tokens) -> list[str]:
    """The guarantee behind the packing: every embedded text `header\ntext` within `max_tokens`.

    Packing adds the counts of pieces, which is exact for a WordPiece tokenizer cutting at
    whitespace; a text that still comes out over (a tokenizer that does not add up) is cut again
    between tokens, each piece measured as it will be embedded."""
    fitted: list[str] = []
    for text in texts:
        if count(embed_text_for(header, text)) <= max_tokens:
            fitted.append(text)
        else:
            fitted.extend(_cut_to_window(text, header, max_tokens, count))
    return fitted


def _cut_to_window(text: str, header: str, max_tokens: int, count: TokenCount) -> list[str]:
    budget = max(1, max_tokens - count(header))
    while True:
        pieces = [piece for a, b in _hard_spans(text, (0, len(text)), budget, count) if (piece := text[a:b].strip())]
        excess = max(count(embed_text_for(header, piece)) - max_tokens for piece in pieces)
        if excess <= 0 or budget == 1:
            return pieces
        budget = max(1, budget - excess)


def chunk_section_texts(section: Section, max_tokens: int, overlap_tokens: int,
                        count: TokenCount = count_tokens) -> list[str]:
    """The texts of one section's chunks, each within `max_tokens`. Overlap never crosses into
    another section because it is only ever taken from the previous chunk of this same call."""
    units = [unit for block in section.blocks for unit in _block_units(block, max_tokens, overlap_tokens, count)]
    chunks: list[list[_Unit]] = []
    current: list[_Unit] = []
    for unit in units:
        if current and _tokens(current) + unit.tokens > max_tokens:
            chunks.append(current)
            current = _start_with_overlap(current, unit, max_tokens, overlap_tokens, count)
        current.append(unit)
    if current:
        chunks.append(current)
    texts = [BLOCK_SEPARATOR.join(unit.text for unit in chunk).strip() for chunk in chunks]
    return [text for text in texts if text]


def _block_units(block: Block, max_tokens: int, overlap_tokens: int, count: TokenCount) -> list[_Unit]:
    if not block.text.strip():
        return []
    tokens = count(block.text)
    if block.kind in ATOMIC_KINDS:
        if tokens <= max_tokens:
            return [_Unit(block.kind, block.text, tokens)]  # whole whenever it fits
        return [_Unit(block.kind, piece, count(piece)) for piece in split_rows(block, max_tokens, count)]
    # Text pieces leave room for the overlap so a continued chunk still fits in max_tokens.
    text_budget = max_tokens - overlap_tokens
    if tokens <= text_budget:
        return [_Unit("text", block.text, tokens)]
    return [_Unit("text", piece, count(piece)) for piece in split_text(block.text, text_budget, count)]


def _tokens(units: list[_Unit]) -> int:
    return sum(unit.tokens for unit in units)


def _start_with_overlap(
    previous: list[_Unit], next_unit: _Unit, max_tokens: int, overlap_tokens: int, count: TokenCount
) -> list[_Unit]:
    """Begin the next chunk with the tail of the previous one, when it has a text tail and the
    overlap still fits beside the next unit (a piece of a big table gets no overlap)."""
    tail = overlap_tail(previous, overlap_tokens, count)
    if not tail:
        return []
    tail_tokens = count(tail)
    if tail_tokens + next_unit.tokens > max_tokens:
        return []
    return [_Unit("text", tail, tail_tokens)]


def overlap_tail(units: list[_Unit], overlap_tokens: int, count: TokenCount = count_tokens) -> str:
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
        tail = _trailing_pieces(text, pattern, overlap_tokens, count)
        if tail:
            return tail
    return ""


def _trailing_pieces(text: str, separator: regex.LinearPattern, budget: int, count: TokenCount) -> str:
    """The longest suffix of whole pieces (cut at `separator`) within `budget` tokens."""
    starts = [0] + [match.end() for match in separator.finditer(text)]
    best = ""
    for start in reversed(starts):
        candidate = text[start:].strip()
        if count(candidate) > budget:
            break
        best = candidate
    return best


def split_rows(block: Block, budget: int, count: TokenCount = count_tokens) -> list[str]:
    """A table or code block too big for one chunk, cut between lines into pieces within `budget`.

    Each piece of a table starts with the table's header row and separator, so it still reads as a
    table with its column names; a single row or line too long for a piece is cut between words."""
    lines = block.text.split("\n")
    header = lines[:2] if block.kind == "table" and len(lines) > 2 and TABLE_SEPARATOR_ROW.match(lines[1]) else []
    if header and count("\n".join(header)) > budget // 2:
        header = []  # a header this big would crowd out the rows it names
    row_budget = budget - (count("\n".join(header)) if header else 0)
    groups: list[list[str]] = []
    current: list[str] = []
    used = 0
    for line in lines[len(header):]:
        tokens = count(line)
        if current and used + tokens > row_budget:
            groups.append(current)
            current, used = [], 0
        if tokens > row_budget:
            groups.extend([piece] for piece in split_text(line, row_budget, count))
            continue
        current.append(line)
        used += tokens
    if current:
        groups.append(current)
    return [text for rows in groups if (text := "\n".join(header + rows).strip("\n")).strip()]


def split_text(text: str, budget: int, count: TokenCount = count_tokens) -> list[str]:
    """Split text into pieces of at most `budget` tokens at the coarsest boundaries that work:
    sentences, then lines, then words, then tokens. Pieces are slices of the original text, so
    line breaks inside a piece survive."""
    spans = _split_span(text, (0, len(text)), budget, 0, count)
    return [piece for start, end in spans if (piece := text[start:end].strip())]


_SPLIT_LEVELS = (SENTENCE_BREAK, LINE_BREAK, WORD_BREAK)
Span = tuple[int, int]


def _split_span(text: str, span: Span, budget: int, level: int, count: TokenCount) -> list[Span]:
    if count(text[span[0] : span[1]]) <= budget:
        return [span]
    if level == len(_SPLIT_LEVELS):
        return _hard_spans(text, span, budget, count)
    pieces: list[Span] = []
    for segment in _segment_spans(text, span, _SPLIT_LEVELS[level]):
        pieces.extend(_split_span(text, segment, budget, level + 1, count))
    return _pack_spans(text, pieces, budget, count)


def _segment_spans(text: str, span: Span, separator: regex.LinearPattern) -> list[Span]:
    """Contiguous spans covering `span`, cut after each separator (so cuts fall between tokens
    and token counts of adjacent spans add up)."""
    start, end = span
    cuts = [start] + [m.end() for m in separator.finditer(text, start, end) if m.end() < end] + [end]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def _pack_spans(text: str, spans: list[Span], budget: int, count: TokenCount) -> list[Span]:
    """Greedily merge adjacent spans while the merged span stays within the budget."""
    packed: list[Span] = []
    current: Span | None = None
    current_tokens = 0
    for span in spans:
        tokens = count(text[span[0] : span[1]])
        if current is not None and current_tokens + tokens <= budget:
            current, current_tokens = (current[0], span[1]), current_tokens + tokens
            continue
        if current is not None:
            packed.append(current)
        current, current_tokens = span, tokens
    if current is not None:
        packed.append(current)
    return packed


def _hard_spans(text: str, span: Span, budget: int, count: TokenCount) -> list[Span]:
    """Last resort for a run with no whitespace longer than the budget (a huge URL or blob): the
    longest prefixes within the budget, each measured whole, cut between tokens where one fits and
    between characters where a single "word" is longer than the budget."""
    token_starts = [m.start() for m in TOKEN.finditer(text, span[0], span[1])]
    spans: list[Span] = []
    start = span[0]
    while start < span[1]:
        cuts = token_starts[bisect.bisect_right(token_starts, start):] + [span[1]]
        end = _longest_fit(text, start, cuts, budget, count)
        if end is None:
            end = _longest_fit(text, start, range(start + 1, span[1] + 1), budget, count) or start + 1
        spans.append((start, end))
        start = end
    return spans


def _longest_fit(text: str, start: int, cuts: "list[int] | range", budget: int, count: TokenCount) -> int | None:
    """The furthest cut with text[start:cut] within the budget (bisection), or None if none fits."""
    low, high, best = 0, len(cuts) - 1, None
    while low <= high:
        middle = (low + high) // 2
        if count(text[start : cuts[middle]]) <= budget:
            best, low = cuts[middle], middle + 1
        else:
            high = middle - 1
    return best


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
