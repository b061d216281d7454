"""In-process ingestion: parse → chunk → embed → build a segment → verify → publish atomically.

One bad file never stops a batch: it gets a clear per-file error in the job report and a
dead-letter entry, and the rest is published. A crash anywhere before the catalog's pointer switch
leaves the previously published version served and nothing partial visible (DESIGN.md §3).
Ray Data runs the same stages at scale (indexing/); this module is the single-process path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from citadel.catalog.base import Catalog
from citadel.config import CitadelConfig
from citadel.embedding.base import Embedder
from citadel.errors import NotFound
from citadel.partition import chunks_to_table
from citadel.reembed import needs_reembed, reembed_tenant
from citadel.sources import (  # re-exported: callers import these from citadel.ingestion
    SUPPORTED_SUFFIXES,
    TENANT_WIDE_GROUP,
    AclSpec,
    DocumentSource,
    FileOutcome,
    InlineDocument,
    SourceFile,
    discover,
    document_id_for,
)
from citadel.stages import (
    PROBES_PER_SEGMENT,
    DeadLetter,
    PreparedDocument,
    build_tenant_segment,
    embed_rows,
    live_versions,
    prepare_document,
    publish_built,
    replayed_fields,
    resolved_fields,
    tenant_lock,
    verify_built,
)
from citadel.types import validate_tenant_id

__all__ = ["AclSpec", "FileOutcome", "InlineDocument", "Ingestor", "JobReport", "PROBES_PER_SEGMENT",
           "SUPPORTED_SUFFIXES", "SourceFile", "TENANT_WIDE_GROUP", "discover", "document_id_for"]

Progress = Callable[[str, int, int], None]


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
    segment_kind: str | None = None  # "delta" (incremental publish) or "base" (a rebuild)
    rebuild_reason: str | None = None
    reembed: dict[str, Any] | None = None  # a re-embed job: rows, resumed_from, previous_model

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
            "segment_kind": self.segment_kind,
            "rebuild_reason": self.rebuild_reason,
            "tier": self.tier,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "chunks_per_s": round(new_chunks / elapsed, 1) if elapsed else 0.0,
            "files": [f.to_dict() for f in self.files],
            **({"reembed": self.reembed} if self.reembed is not None else {}),
        }


class Ingestor:
    def __init__(self, catalog: Catalog, embedder: Embedder, config: CitadelConfig,
                 progress: Progress | None = None):
        self._catalog = catalog
        self._embedder = embedder
        self._config = config
        self._progress = progress or (lambda stage, done, total: None)
        # Where each prepared document's outcome sits in the report, to replace it if embedding fails.
        self._outcome_position: dict[int, int] = {}

    # --------------------------------------------------------------- public
    def ingest(self, tenant_id: str, files: Sequence[SourceFile | InlineDocument], acl: AclSpec, actor: str = "cli",
               job_id: str | None = None) -> JobReport:
        """Run one ingestion job. `job_id`: a job the caller already created (the HTTP API returns its
        id before the work starts); otherwise one is created here."""
        validate_tenant_id(tenant_id)  # before the catalog or a directory sees it
        self._catalog.ensure_tenant(tenant_id)
        report = JobReport(job_id or self._catalog.create_job(tenant_id, "ingest"), tenant_id)
        try:
            with tenant_lock(self._config.partitions_dir, tenant_id):
                self._reembed_if_model_changed(tenant_id)
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
            fields, trust_front_matter = replayed_fields(meta)
            files.append(SourceFile(Path(letter["source"]), meta["document_id"], letter["source"], fields,
                                    trust_front_matter))
            acl.documents[meta["document_id"]] = tuple(meta.get("groups", ()))
        report = self.ingest(tenant_id, files, acl, actor="retry")
        for letter in letters:
            self._catalog.mark_dead_letter_retried(letter["id"])
        return report

    # -------------------------------------------------------------- stages
    def _run(self, report: JobReport, files: Sequence[DocumentSource], acl: AclSpec) -> None:
        started = time.perf_counter()
        self._outcome_position.clear()
        prepared: list[PreparedDocument] = []
        for done, source_file in enumerate(files, start=1):
            result = prepare_document(report.tenant_id, source_file, acl, self._config, self._catalog)
            if isinstance(result, PreparedDocument):
                prepared.append(result)
                self._outcome_position[id(result)] = len(report.files)
                report.files.append(result.outcome())
            elif isinstance(result, DeadLetter):
                report.files.append(self._dead_letter(report, result))
            else:
                report.files.append(result)
            self._progress("parse", done, len(files))
        report.seconds["parse_chunk"] = time.perf_counter() - started

        started = time.perf_counter()
        prepared = self._embed(report, prepared)
        report.seconds["embed"] = time.perf_counter() - started
        if not prepared:
            return
        started = time.perf_counter()
        self._publish_prepared(report, prepared)
        report.seconds["build_publish"] = time.perf_counter() - started

    def _dead_letter(self, report: JobReport, letter: DeadLetter) -> FileOutcome:
        letter_id = self._catalog.add_dead_letter(report.job_id, report.tenant_id, letter.source, letter.code,
                                                  letter.reason, letter.meta())
        return FileOutcome(letter.source, letter.document_id, "failed", code=letter.code, reason=letter.reason,
                           dead_letter_id=letter_id)

    def _embed(self, report: JobReport, prepared: list[PreparedDocument]) -> list[PreparedDocument]:
        """Embed in batches across documents; a failing document is dead-lettered, the rest go on."""
        rows = [(index, chunk) for index, item in enumerate(prepared) for chunk in item.chunks]
        batch = self._config.ingest_pipeline.embed_batch_size
        vectors = np.zeros((len(rows), self._embedder.dim), dtype=np.float32)
        failures: dict[int, str] = {}
        for start in range(0, len(rows), batch):
            window = rows[start : start + batch]
            result = embed_rows(self._embedder, [chunk.embed_text for _, chunk in window],
                                [index for index, _ in window])
            vectors[start : start + len(window)] = result.vectors
            failures.update(result.failures)
            self._progress("embed", start + len(window), len(rows))
        embedded, offset = [], 0
        for index, item in enumerate(prepared):
            item_vectors = vectors[offset : offset + len(item.chunks)]
            offset += len(item.chunks)
            if index in failures:
                letter = DeadLetter(item.source, item.meta.document_id, item.meta.groups, "embed_error",
                                    failures[index], resolved_fields(item.meta))
                report.files[self._outcome_position[id(item)]] = self._dead_letter(report, letter)
                continue
            item.vectors = item_vectors
            embedded.append(item)
        return embedded

    def compact(self, tenant_id: str) -> JobReport:
        """Rebuild the tenant's base segment from its live rows now: the delta and the tombstones go."""
        validate_tenant_id(tenant_id)
        if self._catalog.published_segment(tenant_id) is None:
            raise NotFound(f"tenant {tenant_id!r} has nothing published to compact")
        with tenant_lock(self._config.partitions_dir, tenant_id):
            if self._model_changed(tenant_id):  # stored vectors of another model are never reused
                return self._reembed_locked(tenant_id)
            report = JobReport(self._catalog.create_job(tenant_id, "compact"), tenant_id)
            empty = chunks_to_table([])
            started = time.perf_counter()
            self._build_and_publish(report, empty, np.zeros((0, self._embedder.dim), np.float32), [],
                                    force_rebuild=True)
            report.seconds["build_publish"] = time.perf_counter() - started
        report.status = "succeeded"
        self._catalog.finish_job(report.job_id, report.status, report.to_dict())
        return report

    def reembed(self, tenant_id: str) -> JobReport:
        """Embed every live row of the tenant again with the configured model and publish them as a
        new base segment: what a model change needs (citadel.reembed). Resumes a crashed run."""
        validate_tenant_id(tenant_id)
        with tenant_lock(self._config.partitions_dir, tenant_id):
            return self._reembed_locked(tenant_id)

    def _model_changed(self, tenant_id: str) -> bool:
        return needs_reembed(self._config.partitions_dir, tenant_id, self._catalog.published_segment(tenant_id),
                             self._embedder.model_id, self._embedder.dim)

    def _reembed_if_model_changed(self, tenant_id: str) -> None:
        """Before a publish: a tenant embedded with another model is re-embedded first, so the new
        rows join a segment of the same model (never a stored vector of the old one)."""
        if self._model_changed(tenant_id):
            self._reembed_locked(tenant_id)

    def _reembed_locked(self, tenant_id: str) -> JobReport:
        if self._catalog.published_segment(tenant_id) is None:
            raise NotFound(f"tenant {tenant_id!r} has nothing published to re-embed")
        report = JobReport(self._catalog.create_job(tenant_id, "reembed"), tenant_id)
        started = time.perf_counter()
        try:
            outcome = reembed_tenant(self._catalog, self._config.partitions_dir, tenant_id, self._embedder,
                                     self._config.index, self._config.ingest_pipeline.embed_batch_size,
                                     report.job_id, self._progress)
        except BaseException as error:  # the progress stays on disk: the next run resumes
            report.status = "failed"
            self._catalog.finish_job(report.job_id, "failed", {**report.to_dict(), "error": str(error)})
            raise
        report.seconds["reembed"] = time.perf_counter() - started
        built = outcome.built
        report.segment_id, report.tier, report.total_chunks = built.segment_id, built.tier, built.rows
        report.segment_kind, report.rebuild_reason = built.kind, built.rebuild_reason
        report.reembed = {"rows": outcome.rows, "resumed_from": outcome.resumed_from,
                          "previous_model": outcome.previous_model, "model": self._embedder.model_id}
        report.status = "succeeded"
        self._catalog.finish_job(report.job_id, report.status, report.to_dict())
        return report

    def _publish_prepared(self, report: JobReport, prepared: list[PreparedDocument]) -> None:
        new_table = chunks_to_table([c for p in prepared for c in p.chunks])
        new_vectors = np.concatenate([p.vectors for p in prepared])
        self._build_and_publish(report, new_table, new_vectors, prepared)

    def _build_and_publish(self, report: JobReport, new_table, new_vectors: np.ndarray,
                           prepared: list[PreparedDocument], force_rebuild: bool = False) -> None:
        tenant_id = report.tenant_id
        partitions_dir = self._config.partitions_dir
        previous = self._catalog.published_segment(tenant_id)
        live = live_versions(self._catalog, tenant_id, {p.meta.document_id for p in prepared})
        self._progress("build", 0, 1)
        built = build_tenant_segment(partitions_dir, tenant_id, new_table, new_vectors, previous, live,
                                     self._config.index, self._embedder.model_id, self._embedder.dim,
                                     force_rebuild=force_rebuild)
        verify_built(built)
        publish_built(self._catalog, partitions_dir, built, [p.staged() for p in prepared], report.job_id)
        self._progress("build", 1, 1)
        report.segment_id, report.tier, report.total_chunks = built.segment_id, built.tier, built.rows
        report.segment_kind, report.rebuild_reason = built.kind, built.rebuild_reason
