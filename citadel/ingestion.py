"""In-process ingestion: parse → chunk → embed → build a segment → verify → publish atomically.

One bad file never stops a batch: it gets a clear per-file error in the job report and a
dead-letter entry, and the rest is published. A crash anywhere before the catalog's pointer switch
leaves the previously published version served and nothing partial visible (DESIGN.md §3).
Ray Data runs the same stages at scale (indexing/); this module is the single-process path.
"""

from __future__ import annotations

import fcntl
import fnmatch
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from citadel.catalog.base import Catalog, StagedVersion
from citadel.chunking import chunk_document
from citadel.config import CitadelConfig
from citadel.embedding.base import Embedder
from citadel.errors import CitadelError, InputRejected
from citadel.parsing import parse_bytes
from citadel.partition import (
    CHUNKS,
    VECTORS,
    SegmentSpec,
    build_segment,
    choose_tier,
    chunks_to_table,
    prune_segments,
    verify_segment,
)
from citadel.types import Chunk, DocumentMeta, ParsedDocument, content_hash

SUPPORTED_SUFFIXES = {".md", ".markdown", ".pdf", ".txt", ".text"}
TENANT_WIDE_GROUP = "*"
PROBES_PER_SEGMENT = 3
_SLUG = re.compile(r"[^a-z0-9/._-]+")
Progress = Callable[[str, int, int], None]


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


@dataclass
class JobReport:
    job_id: str
    tenant_id: str
    status: str = "running"
    files: list[FileOutcome] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    segment_id: str | None = None
    tier: str | None = None
    total_chunks: int = 0

    @property
    def failures(self) -> list[FileOutcome]:
        return [f for f in self.files if f.status == "failed"]

    def to_dict(self) -> dict[str, Any]:
        new_chunks = sum(f.chunks for f in self.files if f.status == "published")
        elapsed = sum(self.seconds.values())
        return {
            "job_id": self.job_id,
            "tenant_id": self.tenant_id,
            "status": self.status,
            "documents": len(self.files),
            "published": sum(f.status == "published" for f in self.files),
            "unchanged": sum(f.status == "unchanged" for f in self.files),
            "failed": len(self.failures),
            "chunks": new_chunks,
            "partition_chunks": self.total_chunks,
            "segment_id": self.segment_id,
            "tier": self.tier,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "chunks_per_s": round(new_chunks / elapsed, 1) if elapsed else 0.0,
            "files": [f.to_dict() for f in self.files],
        }


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


@dataclass
class _Prepared:
    meta: DocumentMeta
    version: int
    doc_hash: str
    chunks: list[Chunk]
    outcome: FileOutcome
    vectors: np.ndarray | None = None


class Ingestor:
    def __init__(self, catalog: Catalog, embedder: Embedder, config: CitadelConfig,
                 progress: Progress | None = None):
        self._catalog = catalog
        self._embedder = embedder
        self._config = config
        self._progress = progress or (lambda stage, done, total: None)

    # --------------------------------------------------------------- public
    def ingest(self, tenant_id: str, files: Sequence[SourceFile | InlineDocument], acl: AclSpec, actor: str = "cli") -> JobReport:
        self._catalog.ensure_tenant(tenant_id)
        report = JobReport(self._catalog.create_job(tenant_id, "ingest"), tenant_id)
        try:
            with self._tenant_lock(tenant_id):
                self._run(report, files, acl)
            report.status = "succeeded" if not report.failures else "partial"
        except BaseException as error:
            report.status = "failed"
            self._catalog.finish_job(report.job_id, "failed", {**report.to_dict(), "error": str(error)})
            raise
        self._catalog.finish_job(report.job_id, report.status, report.to_dict())
        return report

    def retry_dead_letters(self, tenant_id: str) -> JobReport | None:
        """Replay the tenant's dead letters whose files still exist; mark each one retried."""
        letters = self._catalog.dead_letters(tenant_id)
        if not letters:
            return None
        files, acl = [], AclSpec()
        for letter in letters:
            meta = letter["meta"]
            files.append(SourceFile(Path(letter["source"]), meta["document_id"], letter["source"]))
            acl.documents[meta["document_id"]] = tuple(meta.get("groups", ()))
        report = self.ingest(tenant_id, files, acl, actor="retry")
        for letter in letters:
            self._catalog.mark_dead_letter_retried(letter["id"])
        return report

    # -------------------------------------------------------------- stages
    def _run(self, report: JobReport, files: Sequence[SourceFile | InlineDocument], acl: AclSpec) -> None:
        started = time.perf_counter()
        prepared = []
        for done, source_file in enumerate(files, start=1):
            item = self._prepare(report, source_file, acl)
            report.files.append(item.outcome if isinstance(item, _Prepared) else item)
            if isinstance(item, _Prepared):
                prepared.append(item)
            self._progress("parse", done, len(files))
        report.seconds["parse_chunk"] = time.perf_counter() - started

        started = time.perf_counter()
        prepared = self._embed(report, prepared)
        report.seconds["embed"] = time.perf_counter() - started
        if not prepared:
            return
        started = time.perf_counter()
        self._build_and_publish(report, prepared)
        report.seconds["build_publish"] = time.perf_counter() - started

    def _prepare(self, report: JobReport, source_file: SourceFile | InlineDocument, acl: AclSpec) -> _Prepared | FileOutcome:
        tenant_id = report.tenant_id
        groups = acl.groups_for(source_file.document_id, source_file.source)
        try:
            parsed, raw_hash = source_file.load(self._config.ingest.max_file_bytes)
            meta = _document_meta(tenant_id, source_file, parsed.title, parsed.metadata, acl)
            groups = meta.groups
            if parsed.metadata.get("status", "published") not in ("published", "approved"):
                return FileOutcome(source_file.source, meta.document_id, "skipped",
                                   code="not_approved", reason=f"status is {parsed.metadata.get('status')!r}")
            doc_hash = content_hash(raw_hash + repr(sorted(meta.groups)))
            requested = _int_or_none(parsed.metadata.get("version"))
            version, unchanged = self._catalog.next_version(tenant_id, meta.document_id, doc_hash, requested)
            if unchanged:
                return FileOutcome(source_file.source, meta.document_id, "unchanged", version=version)
            chunks = chunk_document(parsed, tenant_id=tenant_id, document_id=meta.document_id, version=version,
                                    max_tokens=self._config.chunking.max_tokens,
                                    overlap_tokens=self._config.chunking.overlap_tokens,
                                    title_override=meta.title)
            chunks = [c for c in chunks if c.has_location]
            if not chunks:
                raise CitadelError("the document produced no located chunks", code="no_chunks")
        except CitadelError as error:
            return self._dead_letter(report, source_file, groups, error.code, str(error))
        except (OSError, ValueError) as error:  # unreadable file, bad metadata
            return self._dead_letter(report, source_file, groups, "unreadable", f"{type(error).__name__}: {error}")
        outcome = FileOutcome(source_file.source, meta.document_id, "published", version=version, chunks=len(chunks))
        return _Prepared(meta, version, doc_hash, chunks, outcome)

    def _dead_letter(self, report: JobReport, source_file: SourceFile, groups: tuple[str, ...],
                     code: str, reason: str) -> FileOutcome:
        meta = {"document_id": source_file.document_id, "groups": list(groups)}
        letter = self._catalog.add_dead_letter(report.job_id, report.tenant_id, source_file.source, code, reason, meta)
        return FileOutcome(source_file.source, source_file.document_id, "failed", code=code, reason=reason,
                           dead_letter_id=letter)

    def _embed(self, report: JobReport, prepared: list[_Prepared]) -> list[_Prepared]:
        """Embed per document so one failure dead-letters that document only."""
        embedded = []
        total = sum(len(p.chunks) for p in prepared)
        done = 0
        for item in prepared:
            try:
                item.vectors = self._embedder.embed_passages([c.embed_text for c in item.chunks])
                if item.vectors.shape != (len(item.chunks), self._embedder.dim):
                    raise CitadelError(f"embedder returned shape {item.vectors.shape}", code="embed_error")
                embedded.append(item)
            except Exception as error:  # a model failure must not lose the batch
                outcome = self._dead_letter(report, SourceFile(Path(item.outcome.source), item.meta.document_id,
                                                               item.outcome.source),
                                            item.meta.groups, "embed_error", str(error))
                report.files[report.files.index(item.outcome)] = outcome
            done += len(item.chunks)
            self._progress("embed", done, total)
        return embedded

    def _build_and_publish(self, report: JobReport, prepared: list[_Prepared]) -> None:
        tenant_id = report.tenant_id
        root = self._config.partitions_dir / tenant_id
        previous = self._catalog.published_segment(tenant_id)
        replaced = {p.meta.document_id for p in prepared}
        kept_table, kept_vectors = self._kept_rows(tenant_id, root, previous, replaced)
        new_chunks = [c for p in prepared for c in p.chunks]
        table = pa.concat_tables([kept_table, chunks_to_table(new_chunks)]) if kept_table is not None \
            else chunks_to_table(new_chunks)
        vectors = np.concatenate([kept_vectors] + [p.vectors for p in prepared]) if kept_vectors is not None \
            else np.concatenate([p.vectors for p in prepared])
        tier = choose_tier(tenant_id, table.num_rows, self._config.index)
        spec = SegmentSpec(tenant_id, tier, self._embedder.model_id, self._embedder.dim)
        self._progress("build", 0, 1)
        segment = build_segment(root, spec, table, vectors, self._config.index)
        first_new = table.num_rows - len(new_chunks)
        probes = list(range(first_new, table.num_rows, max(1, len(new_chunks) // PROBES_PER_SEGMENT)))
        verify_segment(segment, table.num_rows, probes[:PROBES_PER_SEGMENT])
        staged = [StagedVersion(p.meta, p.version, p.doc_hash, tuple(c.chunk_id for c in p.chunks),
                                tuple(c.content_hash for c in p.chunks)) for p in prepared]
        self._catalog.publish(tenant_id, segment.name, tier, staged, report.job_id)
        self._progress("build", 1, 1)
        prune_segments(root, keep={segment.name, previous} - {None})
        report.segment_id, report.tier, report.total_chunks = segment.name, tier, table.num_rows

    def _kept_rows(self, tenant_id: str, root: Path, previous: str | None,
                   replaced: set[str]) -> tuple[pa.Table | None, np.ndarray | None]:
        """Rows of the current segment that stay: published versions of documents not being replaced.

        Building the new segment from them is also the compaction: superseded and withdrawn rows go.
        """
        if previous is None:
            return None, None
        table = pq.read_table(root / previous / CHUNKS)
        vectors = np.load(root / previous / VECTORS)
        live = {d.document_id: d.published_version for d in self._catalog.list_documents(tenant_id)
                if d.status == "published" and d.document_id not in replaced}
        keep = [row for row, (doc, ver) in enumerate(zip(table.column("document_id").to_pylist(),
                                                         table.column("version").to_pylist()))
                if live.get(doc) == ver]
        mask = np.zeros(table.num_rows, dtype=bool)
        mask[keep] = True
        return table.filter(pa.array(mask)), vectors[mask]

    @contextmanager
    def _tenant_lock(self, tenant_id: str) -> Iterator[None]:
        """One build per tenant at a time, across processes."""
        lock_dir = self._config.partitions_dir / tenant_id
        lock_dir.mkdir(parents=True, exist_ok=True)
        with open(lock_dir / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _document_meta(tenant_id: str, source_file: SourceFile, title: str | None, front: dict[str, Any],
                   acl: AclSpec) -> DocumentMeta:
    """Front matter wins over the path-derived id; groups come from front matter, else the ACL spec."""
    document_id = str(front.get("id") or source_file.document_id)
    if ":" in document_id:
        raise CitadelError(f"document id {document_id!r} may not contain ':'", code="bad_metadata")
    front_groups = front.get("groups")
    if front_groups:
        groups = tuple(str(g) for g in (front_groups if isinstance(front_groups, list) else [front_groups]))
    else:
        groups = acl.groups_for(document_id, source_file.source)
    visibility = "tenant" if TENANT_WIDE_GROUP in groups else "groups"
    return DocumentMeta(
        tenant_id=tenant_id,
        document_id=document_id,
        title=str(front.get("title") or title or document_id),
        source=source_file.source,
        owner=str(front.get("owner") or ""),
        visibility=visibility,
        effective_date=_str_or_none(front.get("effective_date")),
        supersedes=_str_or_none(front.get("supersedes")),
        groups=tuple(sorted(g for g in groups if g != TENANT_WIDE_GROUP)),
    )


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _int_or_none(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as error:
        raise CitadelError(f"version must be an integer, got {value!r}", code="bad_metadata") from error
