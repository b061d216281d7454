"""What ingestion reads: source files, inline documents, ACL specs, and per-document outcomes.

Shared by the in-process Ingestor (citadel/ingestion.py) and the Ray Data pipeline (indexing/), so
both name documents, assign groups and report outcomes the same way.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

import yaml

from citadel.errors import InputRejected
from citadel.parsing import parse_bytes
from citadel.types import ParsedDocument, content_hash

SUPPORTED_SUFFIXES = {".md", ".markdown", ".pdf", ".txt", ".text"}
TENANT_WIDE_GROUP = "*"
_SLUG = re.compile(r"[^a-z0-9/._-]+")


class DocumentSource(Protocol):
    """Anything ingestion can load: a file on disk or a document that arrives parsed."""

    document_id: str
    source: str

    def load(self, max_bytes: int) -> tuple[ParsedDocument, str]: ...


@dataclass(frozen=True)
class SourceFile:
    """One file to ingest: where it is and the id/source it is known by."""

    path: Path
    document_id: str
    source: str

    def load(self, max_bytes: int) -> tuple[ParsedDocument, str]:
        """(parsed document, hash of the raw bytes). Refuses a huge file before reading it."""
        size = self.path.stat().st_size
        if size > max_bytes:
            raise InputRejected(f"file is {size:,} bytes; the limit is {max_bytes:,} bytes")
        data = self.path.read_bytes()
        return parse_bytes(data, self.source, max_bytes=max_bytes), content_hash(data)


@dataclass(frozen=True)
class InlineDocument:
    """A document that arrives already parsed (benchmark corpora, records from a manifest)."""

    document_id: str
    source: str
    parsed: ParsedDocument

    def load(self, max_bytes: int) -> tuple[ParsedDocument, str]:
        body = "\n".join(b.text for section in self.parsed.sections for b in section.blocks)
        return self.parsed, content_hash(f"{self.parsed.title}\n{body}")


@dataclass
class AclSpec:
    """Which groups may read which documents: `default` plus per-document or glob overrides."""

    default: tuple[str, ...] = ()
    documents: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_groups(cls, groups: Sequence[str]) -> "AclSpec":
        return cls(default=tuple(groups))

    @classmethod
    def from_file(cls, path: Path) -> "AclSpec":
        data = yaml.safe_load(Path(path).read_text()) or {}
        documents = {str(k): tuple(v) for k, v in (data.get("documents") or {}).items()}
        return cls(default=tuple(data.get("default") or ()), documents=documents)

    def groups_for(self, document_id: str, source: str) -> tuple[str, ...]:
        for pattern, groups in self.documents.items():
            if pattern == document_id or fnmatch.fnmatch(source, pattern) or fnmatch.fnmatch(document_id, pattern):
                return groups
        return self.default


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


def discover(paths: Sequence[Path]) -> list[SourceFile]:
    """Expand files and directories into SourceFiles with ids relative to what was named."""
    found: list[SourceFile] = []
    for given in paths:
        given = Path(given)
        if given.is_dir():
            for path in sorted(p for p in given.rglob("*") if p.is_file()):
                if path.suffix.lower() in SUPPORTED_SUFFIXES:
                    found.append(_source_file(path, path.relative_to(given)))
        else:
            found.append(_source_file(given, Path(given.name)))
    return found


def _source_file(path: Path, relative: Path) -> SourceFile:
    return SourceFile(path=path, document_id=document_id_for(relative), source=str(path))


def document_id_for(relative: Path) -> str:
    """A stable, readable id from a relative path: lowercase, no suffix, no ':' (ids use it)."""
    stem = str(relative.with_suffix("")).lower().replace("\\", "/")
    return _SLUG.sub("-", stem).strip("-/") or "document"
