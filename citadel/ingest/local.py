"""The local ingest engine: parse → chunk → embed → build a segment → verify → publish atomically, in
this process (citadel.ingest.engine.IngestEngine; Ray Data runs the same steps at scale, indexing/).

One bad file never stops a batch: it gets a clear per-file error in the job report and a
dead-letter entry, and the rest is published. A crash anywhere before the catalog's pointer switch
leaves the previously published version served and nothing partial visible (DESIGN.md §3).
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

import numpy as np

from citadel.catalog.base import Catalog
from citadel.config import CitadelConfig
from citadel.embedding.base import Embedder
from citadel.errors import NotFound
from citadel.ingest.engine import LOCAL_ENGINE, TenantSources
from citadel.ingest.jobs import jobs_from_dead_letters
from citadel.ingest.reembed import needs_reembed, reembed_tenant
from citadel.ingest.report import JobReport, recorded
from citadel.ingest.sources import AclSpec, DocumentSource, FileOutcome
from citadel.ingest.steps import (
    DeadLetter,
    PreparedDocument,
    build_tenant_segment,
    embed_rows,
    live_versions,
    prepare_document,
    publish_built,
    resolved_fields,
    tenant_lock,
    verify_built,
)
from citadel.segments.build import chunks_to_table
from citadel.segments.expunge import base_holds, stack_holds
from citadel.segments.layout import prune_segments, tenant_root
from citadel.segments.tiering import review_tiers, tier_standing
from citadel.types import validate_tenant_id

Progress = Callable[[str, int, int], None]


class Ingestor:
    """The local engine: one job at a time, one tenant after another, each under its tenant lock."""

    name = LOCAL_ENGINE

    def __init__(self, catalog: Catalog, embedder: Embedder, config: CitadelConfig,
                 progress: Progress | None = None):
        self._catalog = catalog
        self._embedder = embedder
        self._config = config
        self._progress = progress or (lambda stage, done, total: None)
        # Where each prepared document's outcome sits in the report, to replace it if embedding fails.
        self._outcome_position: dict[int, int] = {}

    # --------------------------------------------------------------- public
    def run(self, jobs: Sequence[TenantSources]) -> list[JobReport]:
        """IngestEngine: each tenant's share as its own job, in order; one report per tenant."""
        return [self.ingest(job.tenant_id, job.sources, job.acl, versions=job.versions) for job in jobs]

    def ingest(self, tenant_id: str, files: Sequence[DocumentSource], acl: AclSpec, actor: str = "cli",
               job_id: str | None = None, versions: Mapping[str, int] | None = None) -> JobReport:
        """Run one ingestion job. `job_id`: a job the caller already created (the HTTP API returns its
        id before the work starts); otherwise one is created here. `versions`: document id → the
        version a manifest requests (the catalog numbers the others)."""
        validate_tenant_id(tenant_id)  # before the catalog or a directory sees it
        self._catalog.ensure_tenant(tenant_id)
        report = JobReport(job_id or self._catalog.create_job(tenant_id, "ingest"), tenant_id)
        with recorded(self._catalog, report), tenant_lock(self._config.partitions_dir, tenant_id):
            self._reembed_if_model_changed(tenant_id)
            self._run(report, files, acl, versions or {})
            report.status = "succeeded" if not report.failures else "partial"
        return report

    def retry_dead_letters(self, tenant_id: str) -> JobReport | None:
        """Replay the tenant's dead letters (citadel.ingest.jobs); mark each one retried."""
        jobs, letter_ids = jobs_from_dead_letters(self._catalog, validate_tenant_id(tenant_id))
        if not letter_ids:
            return None
        job = jobs[0]
        report = self.ingest(tenant_id, job.sources, job.acl, actor="retry")
        for letter_id in letter_ids:
            self._catalog.mark_dead_letter_retried(letter_id)
        return report

    # -------------------------------------------------------------- stages
    def _run(self, report: JobReport, files: Sequence[DocumentSource], acl: AclSpec,
             versions: Mapping[str, int]) -> None:
        started = time.perf_counter()
        self._outcome_position.clear()
        prepared: list[PreparedDocument] = []
        for done, source_file in enumerate(files, start=1):
            result = prepare_document(report.tenant_id, source_file, acl, self._config, self._catalog,
                                      versions.get(source_file.document_id))
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

    def compact(self, tenant_id: str, only_if_tier_moves: bool = False) -> JobReport | None:
        """Rebuild the tenant's base segment from its live rows now: the delta and the tombstones go.
        `only_if_tier_moves` (scheduled tier moves, citadel.segments.tiering.apply_tier_moves): only if
        the tier policy still moves the tenant once its lock is held, since every runner checks and
        another may have moved it meanwhile; None when it did not."""
        validate_tenant_id(tenant_id)
        if self._catalog.published_segment(tenant_id) is None:
            raise NotFound(f"tenant {tenant_id!r} has nothing published to compact")
        with tenant_lock(self._config.partitions_dir, tenant_id):
            if only_if_tier_moves and not any(
                    review.moves for review in review_tiers(self._catalog, self._config.index, time.time(), [tenant_id])):
                return None
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

    def expunge(self, tenant_id: str, document_id: str) -> JobReport | None:
        """Delete a withdrawn document's rows from the tenant's partition files: publish the partition
        without them (a delta when only the delta holds them, else a rebuilt base), then delete every
        segment the new pointer does not need, the previous one included (citadel.segments.expunge).
        The catalog must already exclude the document (its rows are not live). None when the tenant
        has nothing published."""
        validate_tenant_id(tenant_id)
        partitions_dir = self._config.partitions_dir
        with tenant_lock(partitions_dir, tenant_id):
            published = self._catalog.published_segment(tenant_id)
            if published is None:
                return None
            root = tenant_root(partitions_dir, tenant_id)
            if not stack_holds(root, published, document_id):
                prune_segments(partitions_dir, tenant_id, keep={published})  # an older segment may hold it
                return None
            if self._model_changed(tenant_id):  # stored vectors of another model are never reused
                report = self._reembed_locked(tenant_id)
            else:
                report = self._expunge_locked(tenant_id, base_holds(root, published, document_id))
            prune_segments(partitions_dir, tenant_id, keep={report.segment_id})
        return report

    def _expunge_locked(self, tenant_id: str, rebuild: bool) -> JobReport:
        report = JobReport(self._catalog.create_job(tenant_id, "expunge"), tenant_id)
        with recorded(self._catalog, report):
            started = time.perf_counter()
            self._build_and_publish(report, chunks_to_table([]), np.zeros((0, self._embedder.dim), np.float32), [],
                                    force_rebuild=rebuild)
            report.seconds["build_publish"] = time.perf_counter() - started
            report.status = "succeeded"
        return report

    def reembed(self, tenant_id: str) -> JobReport:
        """Embed every live row of the tenant again with the configured model and publish them as a
        new base segment: what a model change needs (citadel.ingest.reembed). Resumes a crashed run."""
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
        # The publish (or compaction) is where a tenant moves tier, by its size and recent traffic.
        standing = tier_standing(self._catalog, tenant_id, time.time(), self._config.index)
        built = build_tenant_segment(partitions_dir, tenant_id, new_table, new_vectors, previous, live,
                                     self._config.index, self._embedder.model_id, self._embedder.dim,
                                     force_rebuild=force_rebuild, standing=standing)
        verify_built(built)
        publish_built(self._catalog, partitions_dir, built, [p.staged() for p in prepared], report.job_id)
        self._progress("build", 1, 1)
        report.segment_id, report.tier, report.total_chunks = built.segment_id, built.tier, built.rows
        report.segment_kind, report.rebuild_reason = built.kind, built.rebuild_reason
