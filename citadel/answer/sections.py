"""Opening a citation: the cited section of a document version, for a reader who may read it now.

Every citation carries the deployment's URL of its section (citadel.types.section_url). Following it
passes the same live check as retrieval (DESIGN.md §4 step 5): the caller's permissions are read from
the catalog now, and only the version it may read now (published, not superseded or withdrawn, shared
with one of its groups) opens; anything else — another tenant's document, one the caller's groups
cannot read, a withdrawn or superseded version, a chunk id that is not of that version — is the same
NotFound, so nothing can be probed. What opens is the chunk's whole section (its chunks in order, the
overlap removed, as expansion hands it to the generator) with its heading path, page and the catalog's
governance; when the URL names the sentence the answer quoted (by its key), that sentence is marked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from citadel.answer.expand import layout_of
from citadel.catalog.base import PermissionSource
from citadel.errors import NotFound
from citadel.retrieval.partitions import PartitionCache
from citadel.text import sentence_pieces
from citadel.types import GOVERNANCE_FIELDS, HEADING_SEPARATOR, QUOTE_KEY_CHARS, Principal, quote_key, section_url

# A section's text is returned up to this many characters (a section is one heading on one page;
# a pathological one is cut, and says so).
MAX_SECTION_CHARS = 50_000
# The marks around the quoted sentence in `marked_text`.
QUOTE_OPEN, QUOTE_CLOSE = "<<", ">>"


@dataclass(frozen=True)
class QuoteMark:
    """Where the quoted sentence stands in the section's text (character offsets, end exclusive)."""

    text: str
    start: int
    end: int


@dataclass(frozen=True)
class OpenedSection:
    document_id: str
    version: int
    chunk_id: str
    title: str
    heading_path: list[str]
    page: int | None
    source: str
    text: str
    truncated: bool
    quote: QuoteMark | None
    governance: dict[str, str | None]

    def to_dict(self) -> dict[str, Any]:
        marked = self.text if self.quote is None else (
            f"{self.text[:self.quote.start]}{QUOTE_OPEN}{self.text[self.quote.start:self.quote.end]}{QUOTE_CLOSE}"
            f"{self.text[self.quote.end:]}")
        return {"document_id": self.document_id, "version": self.version, "chunk_id": self.chunk_id,
                "title": self.title, "heading": HEADING_SEPARATOR.join(self.heading_path),
                "heading_path": self.heading_path, "page": self.page, "source": self.source, "text": self.text,
                "marked_text": marked, "truncated": self.truncated,
                "quote": None if self.quote is None else {"text": self.quote.text, "start": self.quote.start,
                                                          "end": self.quote.end},
                **self.governance, "url": section_url(self.document_id, self.version, self.chunk_id)}


def open_section(catalog: PermissionSource, partitions: PartitionCache, principal: Principal, document_id: str,
                 version: int, chunk_id: str, quote: str | None = None) -> OpenedSection:
    """The cited section, after the live check (module docstring); NotFound otherwise. `quote`: the key
    of the quoted sentence (citadel.types.quote_key), marked when the section holds it."""
    missing = NotFound(f"no section {chunk_id!r} of document {document_id!r} version {version} that you may read")
    live = catalog.readable_documents(principal).get(document_id)
    if live is None or live.version != version or not chunk_id.startswith(f"{principal.tenant_id}:"):
        raise missing
    partition = partitions.get(principal.tenant_id)
    layout = layout_of(partition) if partition is not None else None
    row_id = layout.row_of_chunk.get(chunk_id) if layout is not None else None
    if row_id is None:
        raise missing
    row = partition.row(row_id)
    if (row["document_id"], row["version"]) != (document_id, version):
        raise missing  # a chunk of another document or version, named under this one
    text = layout.section_text((document_id, version, row["section_index"]))
    truncated = len(text) > MAX_SECTION_CHARS
    text = text[:MAX_SECTION_CHARS]
    heading = row["heading"] or ""
    return OpenedSection(document_id, version, chunk_id, row["title"], heading.split(HEADING_SEPARATOR) if heading else [],
                         row["page"], row["source"], text, truncated, marked_quote(text, quote),
                         {name: row.get(name) for name in GOVERNANCE_FIELDS})


def marked_quote(text: str, key: str | None) -> QuoteMark | None:
    """The sentence of `text` whose key is `key`, with its offsets in `text`; None when none is."""
    if not key or len(key) != QUOTE_KEY_CHARS:
        return None
    for sentence, _ in sentence_pieces(text):
        if quote_key(sentence) == key:
            span = find_spaced(text, sentence)
            if span is not None:
                return QuoteMark(text[span[0]:span[1]], *span)
    return None


def find_spaced(text: str, sentence: str) -> tuple[int, int] | None:
    """Where `sentence` stands in `text` with any run of whitespace matching any other (a sentence is
    read with its wrapped lines joined), as (start, end) offsets of `text`; None when it does not."""
    flat: list[str] = []
    positions: list[int] = []  # positions[i]: the offset in `text` of flat[i]
    previous_space = False
    for offset, char in enumerate(text):
        space = char.isspace()
        if space and previous_space:
            continue
        flat.append(" " if space else char)
        positions.append(offset)
        previous_space = space
    wanted = " ".join(sentence.split())
    start = "".join(flat).find(wanted)
    if start < 0 or not wanted:
        return None
    last = positions[start + len(wanted) - 1]
    return positions[start], last + 1
