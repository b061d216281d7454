"""Plain data types shared by every layer (DESIGN.md §3)."""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal, Mapping, NewType

from citadel.errors import InvalidTenant

BlockKind = Literal["text", "table", "code"]


class Degradation(StrEnum):
    """What a response lacks and says so in `degraded` (DESIGN.md §5): a stage was skipped or
    replaced, the answer still left. The values are the API's stable strings."""

    VECTOR_LEG_UNAVAILABLE = "vector_leg_unavailable"  # the vector search failed; keyword results only
    KEYWORD_ONLY = "keyword_only"  # the embedder failed, so the vector leg was skipped
    RERANK_SKIPPED = "rerank_skipped"  # off, slow or failing: the fused order stands
    GENERATOR_SECONDARY = "generator_secondary"  # the primary generator failed; the secondary answered
    GENERATOR_FALLBACK = "generator_fallback"  # both failed; the extractive generator answered
    CACHE_UNAVAILABLE = "cache_unavailable"  # the answer cache failed open
    MODEL_PAUSED = "model_paused"  # an admin paused the model: the extractive generator answered
    READER_SKIPPED = "reader_skipped"  # the reader failed: nothing could be confirmed, nothing was asserted
    VERIFIER_SKIPPED = "verifier"  # the claim verifier's judge failed or was slow: claims kept as validated


HEADING_SEPARATOR = " > "  # joins a heading path into a chunk's (and a passage's) `heading`
DocStatus = Literal["draft", "published", "superseded", "archived", "withdrawn"]


# A tenant id names a directory (`partitions/<tenant>/`) and prefixes chunk ids (`tenant:doc:vN:NNNN`),
# so it is a plain lower-case ASCII name: it starts with a letter or digit (so never `.` or `..`), has
# no `/`, `:`, whitespace or control characters, no look-alike Unicode, and case-insensitive
# filesystems cannot merge two tenants. Checked with a FULL match (`$` would accept a trailing newline).
TENANT_ID_MAX_CHARS = 63
TENANT_ID_PATTERN = re.compile(rf"[a-z0-9][a-z0-9._-]{{0,{TENANT_ID_MAX_CHARS - 1}}}", re.ASCII)
TenantId = NewType("TenantId", str)


def validate_tenant_id(value: object) -> TenantId:
    """`value` as a TenantId, or InvalidTenant. Every entry point (CLI, HTTP, manifests, the catalog,
    the verified user context) and every function that forms a tenant's path calls it."""
    if not isinstance(value, str):
        raise InvalidTenant(f"tenant id must be a string, not {type(value).__name__}")
    if not value.isascii() or TENANT_ID_PATTERN.fullmatch(value) is None:
        shown = value[:TENANT_ID_MAX_CHARS + 1]
        raise InvalidTenant(f"invalid tenant id {shown!r}: use 1-{TENANT_ID_MAX_CHARS} characters of a-z, "
                            "0-9, '.', '_' or '-', starting with a letter or digit")
    return TenantId(value)


def content_hash(data: str | bytes) -> str:
    """Stable sha256 hex digest used for documents and chunks."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def make_chunk_id(tenant_id: str, document_id: str, version: int, ordinal: int) -> str:
    """Stable chunk id `tenant:doc:vN:NNNN` (DESIGN.md §3)."""
    return f"{tenant_id}:{document_id}:v{version}:{ordinal:04d}"


def embed_text_for(context_header: str, text: str) -> str:
    """The text that is embedded for a chunk: its context header, then its text."""
    return f"{context_header}\n{text}"


@dataclass(frozen=True)
class Block:
    """One indivisible unit of a section: a paragraph, a whole table or a whole code block."""

    kind: BlockKind
    text: str


@dataclass
class Section:
    """A run of blocks under one heading path, on one page (PDF) or with no page (Markdown/text)."""

    heading_path: tuple[str, ...]
    page: int | None
    blocks: list[Block] = field(default_factory=list)


@dataclass
class ParsedDocument:
    """What a parser returns: a title and located sections, in reading order."""

    title: str
    sections: list[Section]
    source: str
    format: Literal["markdown", "pdf", "text"]
    metadata: dict = field(default_factory=dict)  # front matter (id, owner, version, groups...)


@dataclass(frozen=True)
class Governance:
    """What the trusted catalog states of a document version: the policy it is (its id and revision),
    how sensitive it is and which retention class purges it. Set only by the catalog's writers (the ACL
    file an ingestion reads, the admin API), never by a document's content or a user's request; copied
    into every chunk of the version and into every citation of it. Unset fields are None."""

    policy_id: str | None = None
    policy_revision: str | None = None
    sensitivity: str | None = None
    retention_class: str | None = None

    @classmethod
    def from_mapping(cls, values: "Mapping[str, object] | None") -> "Governance":
        """From a record, a table row or a YAML mapping: absent, null and empty values stay unset."""
        values = values or {}

        def text(name: str) -> str | None:
            value = values.get(name)
            return None if value is None or value == "" else str(value)

        return cls(*(text(name) for name in GOVERNANCE_FIELDS))

    def over(self, fallback: "Governance") -> "Governance":
        """These fields, each unset one taken from `fallback`."""
        return Governance(*(getattr(self, name) or getattr(fallback, name) for name in GOVERNANCE_FIELDS))

    def to_dict(self) -> dict[str, str | None]:
        return {name: getattr(self, name) for name in GOVERNANCE_FIELDS}


GOVERNANCE_FIELDS = ("policy_id", "policy_revision", "sensitivity", "retention_class")
# Where a deployment serves one cited section (serving/http/routers/documents/): every citation names it.
SECTION_PATH = "/v1/documents/{document}/versions/{version}/sections/{chunk_id}"


def section_url(document_id: str, version: int, chunk_id: str, quote: str | None = None) -> str:
    """The deployment's address of a cited section, relative to its base URL. Ids are percent-encoded
    (a document id may hold '/'). `quote`: the sentence of the section the answer quoted, which the
    section's reply marks; the address names it by `quote_key`, so no text of it travels in a URL."""
    path = SECTION_PATH.format(document=urllib.parse.quote(document_id, safe=""), version=int(version),
                               chunk_id=urllib.parse.quote(chunk_id, safe=":"))
    return path if not quote else f"{path}?quote={quote_key(quote)}"


QUOTE_KEY_CHARS = 16


def quote_key(sentence: str) -> str:
    """A short, stable name of a quoted sentence (its whitespace-normalised text, hashed)."""
    return content_hash(" ".join(sentence.split()))[:QUOTE_KEY_CHARS]


@dataclass(frozen=True)
class SectionRef:
    """What a section URL names (section_url's inverse): the ids decoded, the quote by its key."""

    document_id: str
    version: int
    chunk_id: str
    quote_key: str | None = None


# A version in a URL is at most this many digits (the catalog's versions are 32-bit).
MAX_VERSION_DIGITS = 10


def parse_section_url(url: str) -> SectionRef | None:
    """The section a citation's URL names — relative, as section_url writes it, or absolute with any
    base path before `/v1/` — or None when the URL is not a section's. Only the path's shape is read
    here; whether the caller may open it is the live check's (citadel/answer/sections.py)."""
    parts = urllib.parse.urlsplit(url)
    template = SECTION_PATH.split("/")[1:]
    segments = parts.path.split("/")
    if len(segments) <= len(template):
        return None
    named: dict[str, str] = {}
    for expected, segment in zip(template, segments[-len(template):]):
        if expected.startswith("{"):
            named[expected.strip("{}")] = urllib.parse.unquote(segment)
        elif segment != expected:
            return None
    version, quote = named["version"], urllib.parse.parse_qs(parts.query).get("quote", [None])[0]
    if not (named["document"] and named["chunk_id"] and version.isascii() and version.isdigit() and len(version) <= MAX_VERSION_DIGITS):
        return None
    return SectionRef(named["document"], int(version), named["chunk_id"], quote)


@dataclass(frozen=True)
class Chunk:
    """An indexable piece of a document version. `page` is 1-based for PDFs, None otherwise."""

    chunk_id: str
    tenant_id: str
    document_id: str
    version: int
    ordinal: int
    title: str
    heading_path: tuple[str, ...]
    page: int | None
    text: str
    context_header: str
    content_hash: str
    source: str
    section_index: int = 0
    governance: Governance = Governance()  # the version's, from the catalog (Governance)

    @property
    def heading(self) -> str:
        return HEADING_SEPARATOR.join(self.heading_path)

    @property
    def embed_text(self) -> str:
        """The text that is embedded: the context header then the chunk text."""
        return embed_text_for(self.context_header, self.text)

    @property
    def has_location(self) -> bool:
        return bool(self.heading_path) or self.page is not None


@dataclass(frozen=True)
class Principal:
    """A verified caller: tenant, user and groups come from identity, never from a request body."""

    tenant_id: str
    user_id: str
    groups: frozenset[str]

    def __post_init__(self) -> None:
        validate_tenant_id(self.tenant_id)  # a principal names a partition: never a path outside it

    @property
    def acl_signature(self) -> str:
        """A hash of the tenant and the sorted groups, encoded as a JSON list so no group name can
        imitate a separator: {"a,b"} and {"a", "b"} are different signatures."""
        return content_hash(json.dumps([self.tenant_id, sorted(self.groups)]))[:32]


@dataclass(frozen=True)
class DocumentMeta:
    """Metadata supplied with a document at ingestion."""

    tenant_id: str
    document_id: str
    title: str | None = None
    source: str = ""
    owner: str = ""
    visibility: Literal["tenant", "groups"] = "groups"
    effective_date: str | None = None
    supersedes: str | None = None
    groups: tuple[str, ...] = ()
    governance: Governance = Governance()

    def __post_init__(self) -> None:
        validate_tenant_id(self.tenant_id)


@dataclass
class Passage:
    """A retrieved, live-checked chunk ready to leave the server."""

    chunk_id: str
    text: str
    document_id: str
    title: str
    version: int
    heading: str
    page: int | None
    source: str
    score: float
    section_index: int = 0  # for parent-section expansion; not part of the public JSON
    # Rank (from 1) of the chunk in each retrieval leg's candidates, None when that leg did not
    # return it: the confidence gate reads whether the legs agree. Not part of the public JSON.
    vector_rank: int | None = None
    keyword_rank: int | None = None
    governance: Governance = Governance()  # the version's, copied from its chunk row

    @property
    def section_title(self) -> str:
        """The last heading of the passage's heading path: its own section's title."""
        return self.heading.rsplit(HEADING_SEPARATOR, 1)[-1]

    def to_dict(self) -> dict:
        return {
            "chunk_id": self.chunk_id,
            "text": self.text,
            "document_id": self.document_id,
            "title": self.title,
            "version": self.version,
            "heading": self.heading,
            "page": self.page,
            "source": self.source,
            "score": round(float(self.score), 6),
            **self.governance.to_dict(),
            "url": section_url(self.document_id, self.version, self.chunk_id),
        }
