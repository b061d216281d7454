"""What ingestion reads: source files, inline documents, ACL specs, trusted document fields, and
per-document outcomes.

Shared by the in-process Ingestor (citadel/ingest/local.py) and the Ray Data pipeline (indexing/), so
both name documents, assign groups and report outcomes the same way.

A document's identity and permissions — its id, groups, owner, status, effective date, what it
supersedes — come from whoever starts the job (the upload request, CLI flags and ACL spec, a
manifest, a replayed dead letter), never from the file's own content: a file that says
`groups: "*"` or `id: someone-elses-doc` in its front matter changes nothing. Only an operator's job
that explicitly trusts front matter (`citadel ingest --trust-front-matter`) reads them from there.
"""

from __future__ import annotations

import datetime
import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import yaml

from citadel import regex
from citadel.errors import BadMetadata, InputRejected
from citadel.parsing import OcrSettings, parse_bytes
from citadel.types import GOVERNANCE_FIELDS, Governance, ParsedDocument, content_hash

SUPPORTED_SUFFIXES = {".md", ".markdown", ".pdf", ".txt", ".text"}
TENANT_WIDE_GROUP = "*"
_SLUG = regex.compile("sources.slug", r"[^a-z0-9/._-]+")
ISO_DATE = regex.compile("sources.iso_date", r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
MAX_FIELD_CHARS = 256
# Front-matter keys an operator's trusting job may take identity and permissions from.
TRUSTED_FRONT_MATTER_KEYS = ("id", "groups", "owner", "status", "effective_date", "supersedes", "version")


@dataclass(frozen=True)
class TrustedFields:
    """A document's owner, status, effective date and predecessor, as the job's requester states
    them (request body, manifest columns, a dead letter's record). Checked on construction: a date
    is an ISO calendar date (YYYY-MM-DD), names are bounded single-line text."""

    owner: str = ""
    status: str | None = None
    effective_date: str | None = None
    supersedes: str | None = None
    # Policy id and revision, sensitivity, retention class: the catalog's, as the admin API states them.
    governance: Governance = Governance()

    def __post_init__(self) -> None:
        for name in ("owner", "status", "supersedes", "effective_date"):
            check_field(name, getattr(self, name))
        check_governance(self.governance)
        if self.effective_date is not None and not is_iso_date(self.effective_date):
            raise BadMetadata(f"effective_date {self.effective_date!r} is not an ISO date (YYYY-MM-DD)")
        if self.supersedes is not None and (not self.supersedes or ":" in self.supersedes):
            raise BadMetadata(f"supersedes {self.supersedes!r} is not a document id")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "TrustedFields":
        """From a manifest row, a dead letter's record or trusted front matter (YAML gives dates as
        dates); absent, null and empty values stay unset."""
        def text(name: str) -> str | None:
            value = values.get(name)
            return None if value is None or value == "" else str(value)

        return cls(owner=text("owner") or "", status=text("status"), effective_date=text("effective_date"),
                   supersedes=text("supersedes"), governance=Governance.from_mapping(values))

    def over(self, fallback: "TrustedFields") -> "TrustedFields":
        """These fields, each unset one taken from `fallback`."""
        return TrustedFields(owner=self.owner or fallback.owner, status=self.status or fallback.status,
                             effective_date=self.effective_date or fallback.effective_date,
                             supersedes=self.supersedes or fallback.supersedes,
                             governance=self.governance.over(fallback.governance))

    def to_dict(self) -> dict[str, str]:
        """The set fields only (a dead letter's record, a manifest row), governance ones flat."""
        plain = {k: v for k, v in self.__dict__.items() if v and k != "governance"}
        return {**plain, **{k: v for k, v in self.governance.to_dict().items() if v}}


def check_field(name: str, value: str | None) -> None:
    if value is not None and (len(value) > MAX_FIELD_CHARS or not value.isprintable()):
        raise BadMetadata(f"{name} must be printable text of at most {MAX_FIELD_CHARS} characters")


def check_governance(governance: Governance) -> None:
    """Bounded, printable, single-line names (which sensitivities and retention classes exist is the
    config's: `governance`, checked when a document is prepared)."""
    for name in GOVERNANCE_FIELDS:
        check_field(name, getattr(governance, name))


def is_iso_date(value: str) -> bool:
    if not ISO_DATE.fullmatch(value):
        return False
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def is_published_status(status: str | None, published_statuses: Sequence[str]) -> bool:
    """An allowlist: a document is approved for readers only with no stated status (an operator's
    or admin's job that says nothing publishes) or one of the configured published statuses, case
    and surrounding space ignored. "Draft v2", "archived" or anything unknown is not approved."""
    if status is None:
        return True
    return status.strip().casefold() in {s.strip().casefold() for s in published_statuses}


class DocumentSource(Protocol):
    """Anything ingestion can load: a file on disk or a document that arrives parsed, with the
    trusted fields its job states for it and whether that job trusts the file's front matter.
    `replay`: it is a dead letter's replay, so its OCR gets the longer budget (ingest.ocr.retry_multiplier).
    `load`'s `ocr` says how a PDF's scanned pages are read (None: they stay empty)."""

    document_id: str
    source: str
    fields: TrustedFields
    trust_front_matter: bool
    replay: bool

    def load(self, max_bytes: int, ocr: OcrSettings | None = None) -> tuple[ParsedDocument, str]: ...


@dataclass(frozen=True)
class SourceFile:
    """One file to ingest: where it is, the id/source it is known by, and its trusted fields.

    `trust_front_matter`: the operator who named this file lets its front matter state its id,
    groups, owner, status, effective date, predecessor and version (`citadel ingest
    --trust-front-matter`, or the replay of such a job's dead letter). Never set for an upload."""

    path: Path
    document_id: str
    source: str
    fields: TrustedFields = TrustedFields()
    trust_front_matter: bool = False
    replay: bool = False

    def load(self, max_bytes: int, ocr: OcrSettings | None = None) -> tuple[ParsedDocument, str]:
        """(parsed document, hash of the raw bytes). Refuses a huge file before reading it."""
        size = self.path.stat().st_size
        if size > max_bytes:
            raise InputRejected(f"file is {size:,} bytes; the limit is {max_bytes:,} bytes")
        data = self.path.read_bytes()
        return parse_bytes(data, self.source, max_bytes=max_bytes, ocr=ocr), content_hash(data)


@dataclass(frozen=True)
class InlineDocument:
    """A document that arrives already parsed (benchmark corpora, records from a manifest)."""

    document_id: str
    source: str
    parsed: ParsedDocument
    fields: TrustedFields = TrustedFields()
    trust_front_matter: bool = False
    replay: bool = False

    def load(self, max_bytes: int, ocr: OcrSettings | None = None) -> tuple[ParsedDocument, str]:
        body = "\n".join(b.text for section in self.parsed.sections for b in section.blocks)
        return self.parsed, content_hash(f"{self.parsed.title}\n{body}")


@dataclass
class AclSpec:
    """Which groups may read which documents: `default` plus per-document or glob overrides; and the
    catalog's governance of documents (`governance:` in the file, by id or glob: policy id and
    revision, sensitivity, retention class), which nothing in a document's own content can change."""

    default: tuple[str, ...] = ()
    documents: dict[str, tuple[str, ...]] = field(default_factory=dict)
    governance: dict[str, Governance] = field(default_factory=dict)

    @classmethod
    def from_groups(cls, groups: Sequence[str]) -> "AclSpec":
        return cls(default=tuple(groups))

    @classmethod
    def from_file(cls, path: Path) -> "AclSpec":
        data = yaml.safe_load(Path(path).read_text()) or {}
        documents = {str(k): tuple(v) for k, v in (data.get("documents") or {}).items()}
        governance = {str(k): Governance.from_mapping(v or {}) for k, v in (data.get("governance") or {}).items()}
        for stated in governance.values():
            check_governance(stated)
        return cls(default=tuple(data.get("default") or ()), documents=documents, governance=governance)

    def groups_for(self, document_id: str, source: str) -> tuple[str, ...]:
        groups = _first_match(self.documents, document_id, source)
        return self.default if groups is None else groups

    def governance_for(self, document_id: str, source: str) -> Governance:
        return _first_match(self.governance, document_id, source) or Governance()


def _first_match(by_pattern: Mapping[str, Any], document_id: str, source: str) -> Any:
    """The value of the first pattern naming the document (its id, or a glob of its id or source)."""
    for pattern, value in by_pattern.items():
        if pattern == document_id or fnmatch.fnmatch(source, pattern) or fnmatch.fnmatch(document_id, pattern):
            return value
    return None


@dataclass
class FileOutcome:
    source: str
    document_id: str
    status: str  # published | unchanged | failed | skipped
    version: int | None = None
    chunks: int = 0
    code: str | None = None
    reason: str | None = None
    dead_letter_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def discover(paths: Sequence[Path], *, trust_front_matter: bool = False) -> list[SourceFile]:
    """Expand files and directories into SourceFiles with ids relative to what was named.
    `trust_front_matter`: the operator's explicit per-job choice (see SourceFile)."""
    found: list[SourceFile] = []
    for given in paths:
        given = Path(given)
        if given.is_dir():
            for path in sorted(p for p in given.rglob("*") if p.is_file()):
                if path.suffix.lower() in SUPPORTED_SUFFIXES:
                    found.append(_source_file(path, path.relative_to(given), trust_front_matter))
        else:
            found.append(_source_file(given, Path(given.name), trust_front_matter))
    return found


def _source_file(path: Path, relative: Path, trust_front_matter: bool) -> SourceFile:
    return SourceFile(path=path, document_id=document_id_for(relative), source=str(path),
                      trust_front_matter=trust_front_matter)


def document_id_for(relative: Path) -> str:
    """A stable, readable id from a relative path: lowercase, no suffix, no ':' (ids use it)."""
    stem = str(relative.with_suffix("")).lower().replace("\\", "/")
    return _SLUG.sub("-", stem).strip("-/") or "document"
