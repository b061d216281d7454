"""The Ray Data ingestion pipeline: the only module that calls `ray.data` (DESIGN.md §2).

    records ─▶ ParseChunkStage (actors) ─▶ EmbedStage (actor pool) ─▶ AssignPartitionStage ─▶ outcomes
                                                                          │ staged Parquet per tenant
    driver: outcomes → report + dead letters; per-tenant builds as parallel Ray tasks (exact / HNSW /
    DiskANN by tier; tiny tenants packed into shared tasks); then, in the driver, verify and publish
    each tenant with the catalog's pointer switch (one transaction per tenant), under its lock.

A crash anywhere before a tenant's pointer switch leaves that tenant's previous version served: new
segments are complete directories no pointer names until `publish`, and staged rows live under the
job's staging folder, which the next job sweeps once its owner is gone.

`RayDataEngine` is the IngestEngine (citadel.ingest.engine) over this pipeline: the CLI runs the same
job on it as on the local engine.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray
import ray.data

from citadel.catalog.base import Catalog, JobLog
from citadel.config import CitadelConfig
from citadel.embedding.factory import embedder_identity, make_embedder
from citadel.errors import CitadelError
from citadel.ingest.engine import RAY_ENGINE, TenantSources
from citadel.ingest.local import Ingestor
from citadel.ingest.reembed import needs_reembed
from citadel.ingest.report import JobReport, plain, recorded
from citadel.ingest.sources import AclSpec, FileOutcome
from citadel.ingest.steps import (
    BuiltSegment,
    VersionSnapshot,
    live_versions,
    meta_from_json,
    plan_build_groups,
    publish_built,
    staged_from_partition,
    tenant_lock,
    verify_built,
)
from citadel.locks import LockHeld, file_lock
from citadel.segments.compaction import RebuildReason
from citadel.segments.layout import tenant_root
from citadel.segments.manifest import MANIFEST, SegmentKind, read_manifest
from citadel.segments.tiering import tier_standing
from indexing.plan import StagePlan, plan_stages
from indexing.records import records_from_jobs, tenants_of
from indexing.stages import (
    FAILED,
    PUBLISHED,
    AssignPartitionStage,
    BuildFailure,
    EmbedStage,
    ParseChunkStage,
    TenantBuild,
    build_tenant_group,
)

Progress = Callable[[str, int, int], None]
STAGING_DIR = "staging"
OWNER_LOCK = ".owner.lock"
MULTI_TENANT_JOB = "*"  # the jobs table's tenant for a job spanning several tenants
INCOMPLETE = "incomplete"
WRITER_ACTORS = 1  # staging writes are cheap; one writer keeps a tenant's files few

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------ report
@dataclass
class TenantResult:
    tenant_id: str
    status: str  # published | failed
    segment_id: str | None = None
    tier: str | None = None
    rows: int = 0
    new_chunks: int = 0
    build_s: float = 0.0
    segment_kind: SegmentKind | None = None  # delta (incremental) or base (a rebuild)
    rebuild_reason: RebuildReason | None = None
    code: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        values = {**self.__dict__, "segment_kind": plain(self.segment_kind),
                  "rebuild_reason": plain(self.rebuild_reason)}
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in values.items() if v is not None}


@dataclass
class PipelineReport(JobReport):
    """The in-process job report (same keys) plus what a multi-tenant, streaming job adds.

    `seconds` holds wall-clock phases (stream = parse, chunk, embed and staging overlapped; build;
    verify_publish), so `chunks_per_s` is new chunks over the job's wall time. `busy_seconds` is the
    time spent inside each stage across all workers: where the CPU went.
    """

    engine: str = "raydata"
    busy_seconds: dict[str, float] = field(default_factory=dict)
    tenants: list[TenantResult] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        report = super().to_dict()
        wall = sum(self.seconds.values())
        report["chunks_per_s"] = round(report["chunks"] / wall, 1) if wall else 0.0
        report.update(
            engine=self.engine,
            tenants=len(self.tenants),
            busy_seconds={k: round(v, 3) for k, v in self.busy_seconds.items()},
            build_by_tier=self.build_by_tier(),
            tenant_results=[t.to_dict() for t in self.tenants],
            plan=self.plan,
        )
        return report

    def build_by_tier(self) -> dict[str, dict[str, float]]:
        tiers: dict[str, dict[str, float]] = {}
        for tenant in self.tenants:
            if tenant.tier is None:
                continue
            entry = tiers.setdefault(tenant.tier, {"tenants": 0, "chunks": 0, "build_s": 0.0, "max_build_s": 0.0})
            entry["tenants"] += 1
            entry["chunks"] += tenant.rows
            entry["build_s"] = round(entry["build_s"] + tenant.build_s, 3)
            entry["max_build_s"] = round(max(entry["max_build_s"], tenant.build_s), 3)
        return tiers


# --------------------------------------------------------------------------------------- staging
@contextmanager
def staging_area(home: Path, job_id: str, catalog: JobLog) -> Iterator[Path]:
    """The job's folder for staged rows, locked while the job lives and removed when it ends.

    Folders left by a killed job are swept here: their lock is free because their owner is dead.
    """
    root = Path(home) / STAGING_DIR
    root.mkdir(parents=True, exist_ok=True)
    _sweep_abandoned(root, catalog)
    directory = root / job_id
    directory.mkdir()
    with file_lock(directory / OWNER_LOCK):
        try:
            yield directory
        finally:
            shutil.rmtree(directory, ignore_errors=True)


def _sweep_abandoned(root: Path, catalog: JobLog) -> None:
    for directory in root.iterdir():
        lock = directory / OWNER_LOCK
        if not directory.is_dir() or not lock.exists():
            continue
        try:
            with file_lock(lock, blocking=False):
                _reap(directory, catalog)
        except LockHeld:
            continue  # a live job owns it


def _reap(directory: Path, catalog: JobLog) -> None:
    """Fail the dead job that owned this staging folder, and remove the folder."""
    job = catalog.get_job(directory.name)
    if job and job["status"] == "running":
        catalog.finish_job(directory.name, "failed", {"error": "abandoned: the job's driver died"})
    shutil.rmtree(directory, ignore_errors=True)


# ---------------------------------------------------------------------------------------- pipeline
@dataclass
class _Document:
    """One document's outcome, merged over the batches its rows travelled in."""

    tenant_id: str
    doc_order: int
    row: dict[str, Any]
    chunks: int = 0
    files: set[str] = field(default_factory=set)
    counted: bool = False  # already counted as done in the progress

    @property
    def status(self) -> str:
        return self.row["status"]


class RayIngestPipeline:
    """Runs one ingestion job on the connected Ray instance (see cluster/ray_local.py)."""

    def __init__(self, catalog: Catalog, config: CitadelConfig, progress: Progress | None = None):
        self._catalog = catalog
        # The home as an absolute path: the stages and build tasks run on other nodes, whose working
        # directory need not be the driver's (Ray only follows the driver's cwd on its own machine).
        self._config = config.model_copy(update={"home": Path(config.home).resolve()})
        self._settings = config.ingest_pipeline
        self._progress = progress or (lambda stage, done, total: None)
        self._model_id, self._dim = embedder_identity(config.embedding)
        self._file_tenants: list[str] = []  # the tenant of each report.files entry, same order

    def run(self, records: pa.Table, acl: AclSpec | None = None) -> PipelineReport:
        """Ingest every record; one bad document never stops the job."""
        tenants = tenants_of(records)
        for tenant_id in tenants:
            self._catalog.ensure_tenant(tenant_id)
        job_tenant = tenants[0] if len(tenants) == 1 else MULTI_TENANT_JOB
        report = PipelineReport(self._catalog.create_job(job_tenant, "ingest"), job_tenant)
        with recorded(self._catalog, report):
            with staging_area(self._config.home, report.job_id, self._catalog) as staging:
                documents = self._stream(records, acl, tenants, staging, report)
                self._build_and_publish(documents, report)
            failed = any(t.status == FAILED for t in report.tenants)
            report.status = "partial" if report.failures or failed else "succeeded"
        return report

    # ------------------------------------------------------------------ stream: parse → embed → stage
    def _dataset(self, records: pa.Table, acl: AclSpec | None, tenants: list[str], staging: Path,
                 plan: StagePlan) -> ray.data.Dataset:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # the CLI draws its own (rich on a terminal, log lines otherwise)
        logging.getLogger("ray.data").setLevel(logging.WARNING)  # Ray Data's per-run INFO lines are noise here
        snapshot = VersionSnapshot.from_catalog(self._catalog, tenants)
        settings = self._settings
        dataset = ray.data.from_arrow(_split(records, plan.input_blocks))
        dataset = dataset.map_batches(
            ParseChunkStage, fn_constructor_kwargs={"config": self._config, "versions": snapshot, "acl": acl},
            batch_size=settings.parse_batch_documents, batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=plan.parse_actors), num_cpus=plan.parse_cpus)
        dataset = dataset.map_batches(
            EmbedStage, fn_constructor_kwargs={"embedding": self._config.embedding, "dtype": settings.embed_dtype,
                                               "torch_threads": plan.torch_threads, "device": plan.device},
            batch_size=settings.embed_batch_size, batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=plan.embed_actors),
            num_cpus=plan.embed_cpus, num_gpus=plan.embed_gpus or None)
        return dataset.map_batches(
            AssignPartitionStage, fn_constructor_kwargs={"staging_dir": str(staging)},
            batch_size=None, batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=WRITER_ACTORS),
            num_cpus=plan.write_cpus)

    def _stream(self, records: pa.Table, acl: AclSpec | None, tenants: list[str], staging: Path,
                report: PipelineReport) -> dict[tuple[str, int], _Document]:
        started = time.perf_counter()
        node_cpus = max((n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")), default=None)
        plan = plan_stages(self._settings, ray.cluster_resources().get("CPU", 1.0), os.cpu_count() or 1,
                           records.num_rows, node_cpus)
        report.plan = plan.__dict__
        documents: dict[tuple[str, int], _Document] = {}
        busy = {"parse_chunk": 0.0, "embed": 0.0, "stage_write": 0.0, "model_load": 0.0}
        done, total = 0, records.num_rows
        self._progress("documents", 0, total)
        dataset = self._dataset(records, acl, tenants, staging, plan)
        for batch in dataset.iter_batches(batch_format="pyarrow", batch_size=None):
            for row in batch.to_pylist():
                done += _merge_outcome(documents, row)
                busy["parse_chunk"] += row["parse_s"]
                busy["embed"] += row["embed_s"]
                busy["stage_write"] += row["write_s"]
                busy["model_load"] += row["load_s"]
            self._progress("documents", done, total)
        report.busy_seconds.update(busy)
        report.seconds["stream"] = time.perf_counter() - started
        self._record_outcomes(documents, report)
        return documents

    def _record_outcomes(self, documents: dict[tuple[str, int], _Document], report: PipelineReport) -> None:
        """File outcomes in input order; dead letters for failed documents."""
        self._file_tenants = []
        for document in sorted(documents.values(), key=lambda d: d.doc_order):
            row = document.row
            if row["status"] == PUBLISHED and document.chunks != row["doc_chunks"]:
                row.update(status=FAILED, code=INCOMPLETE,
                           reason=f"{document.chunks} of {row['doc_chunks']} chunks reached staging")
            chunks = row["doc_chunks"] if row["status"] == PUBLISHED else 0
            outcome = FileOutcome(row["source"], row["document_id"], row["status"], version=row["version"],
                                  chunks=chunks, code=row["code"], reason=row["reason"])
            if outcome.status == FAILED:
                outcome.version = None
                outcome.dead_letter_id = self._catalog.add_dead_letter(
                    report.job_id, document.tenant_id, row["source"], row["code"], row["reason"],
                    _replay(row))
            report.files.append(outcome)
            self._file_tenants.append(document.tenant_id)

    # ------------------------------------------------------------------ build → verify → publish
    def _build_and_publish(self, documents: dict[tuple[str, int], _Document], report: PipelineReport) -> None:
        builds, staged_documents = self._tenant_builds(documents)
        if not builds:
            return
        started = time.perf_counter()
        counts = {tenant_id: sum(staged_documents[tenant_id][1]) + self._previous_rows(build)
                  for tenant_id, build in builds.items()}
        groups = plan_build_groups(counts, self._config.index, self._settings.tiny_pack_chunks)
        pending = self._launch_builds(groups, builds)
        published = 0
        publish_seconds = 0.0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for result in ray.get(ready[0]):
                publish_started = time.perf_counter()
                report.tenants.append(self._verify_and_publish(result, staged_documents, report))
                publish_seconds += time.perf_counter() - publish_started
                published += 1
                self._progress("publish", published, len(builds))
        report.seconds["build"] = time.perf_counter() - started - publish_seconds
        report.seconds["verify_publish"] = publish_seconds
        report.total_chunks = sum(t.rows for t in report.tenants if t.status == PUBLISHED)
        if len(report.tenants) == 1 and report.tenants[0].status == PUBLISHED:
            report.segment_id, report.tier = report.tenants[0].segment_id, report.tenants[0].tier
        self._fail_documents_of_failed_tenants(report)

    def _tenant_builds(self, documents: dict[tuple[str, int], _Document]):
        """Per tenant with something to publish: its build and (document id → meta/version/hash, chunk counts)."""
        by_tenant: dict[str, list[_Document]] = {}
        for document in documents.values():
            if document.status == PUBLISHED:
                by_tenant.setdefault(document.tenant_id, []).append(document)
        builds: dict[str, TenantBuild] = {}
        staged: dict[str, tuple[dict, list[int]]] = {}
        for tenant_id, docs in sorted(by_tenant.items()):
            replaced = {d.row["document_id"] for d in docs}
            builds[tenant_id] = TenantBuild(
                tenant_id=tenant_id,
                files=tuple(sorted({f for d in docs for f in d.files})),
                doc_orders=frozenset(d.doc_order for d in docs),
                previous=self._catalog.published_segment(tenant_id),
                live=live_versions(self._catalog, tenant_id, replaced),
                standing=tier_standing(self._catalog, tenant_id, time.time(), self._config.index),
            )
            staged[tenant_id] = ({d.row["document_id"]: (meta_from_json(d.row["meta_json"]), d.row["version"],
                                                         d.row["doc_hash"]) for d in docs},
                                 [d.chunks for d in docs])
        return builds, staged

    def _previous_rows(self, build: TenantBuild) -> int:
        """Rows the previous segment holds (an upper bound of what the new one keeps)."""
        if build.previous is None:
            return 0
        directory = tenant_root(self._config.partitions_dir, build.tenant_id) / build.previous
        return read_manifest(directory).total_rows if (directory / MANIFEST).exists() else 0

    def _launch_builds(self, groups: list[list[str]], builds: dict[str, TenantBuild]) -> list:
        task = ray.remote(build_tenant_group).options(num_cpus=self._settings.build_cpus)
        return [task.remote([builds[t] for t in group], str(self._config.partitions_dir), self._config.index,
                            self._model_id, self._dim, self._settings.build_cpus) for group in groups]

    def _verify_and_publish(self, result: BuiltSegment | BuildFailure, staged_documents, report) -> TenantResult:
        if isinstance(result, BuildFailure):
            return TenantResult(result.tenant_id, FAILED, code=result.code, reason=result.reason)
        documents = staged_documents[result.tenant_id][0]
        tenant = TenantResult(result.tenant_id, FAILED, result.segment_id, result.tier, result.rows,
                              result.rows - result.first_new_row, result.seconds, result.kind,
                              result.rebuild_reason)
        try:
            with tenant_lock(self._config.partitions_dir, result.tenant_id):
                partition = verify_built(result)
                staged = staged_from_partition(partition, result.first_new_row, documents)
                publish_built(self._catalog, self._config.partitions_dir, result, staged, report.job_id)
            tenant.status = PUBLISHED
        except CitadelError as error:  # verification failed, or another job published meanwhile
            tenant.code, tenant.reason = error.code, str(error)
            shutil.rmtree(result.path, ignore_errors=True)
        return tenant

    def _fail_documents_of_failed_tenants(self, report: PipelineReport) -> None:
        """A tenant that did not publish publishes none of its documents: say so per document."""
        failed = {t.tenant_id: t for t in report.tenants if t.status == FAILED}
        for outcome, tenant_id in zip(report.files, self._file_tenants):
            if tenant_id in failed and outcome.status == PUBLISHED:
                outcome.status, outcome.code, outcome.reason = FAILED, failed[tenant_id].code, failed[tenant_id].reason


def _merge_outcome(documents: dict[tuple[str, int], _Document], row: dict[str, Any]) -> int:
    """Fold one outcome row in; returns 1 when it completes its document (for progress)."""
    key = (row["tenant_id"], row["doc_order"])
    document = documents.get(key)
    if document is None:
        document = documents[key] = _Document(row["tenant_id"], row["doc_order"], dict(row))
    elif row["status"] == FAILED and document.status != FAILED:
        document.row.update(status=FAILED, code=row["code"], reason=row["reason"])
    document.chunks += row["chunks"]
    if row["file"]:
        document.files.add(row["file"])
    complete = row["status"] != PUBLISHED or document.chunks >= (row["doc_chunks"] or 0)
    if complete and not document.counted:
        document.counted = True
        return 1
    return 0


def _replay(row: dict[str, Any]) -> dict[str, Any]:
    """The failed document's dead-letter record (citadel.ingest.steps.replay_meta)."""
    if row.get("replay_json"):
        return json.loads(row["replay_json"])
    return {"document_id": row["document_id"], "groups": []}


def _split(records: pa.Table, blocks: int) -> list[pa.Table]:
    """Contiguous slices of about equal size: each becomes one input block."""
    size = -(-records.num_rows // blocks) if records.num_rows else 1
    return [records.slice(start, size) for start in range(0, max(records.num_rows, 1), size)]


# -------------------------------------------------------------------------------------- the engine
class RayDataEngine:
    """The IngestEngine on Ray Data: a whole job (every tenant of it) is one streaming pipeline run.

    `connect` enters the Ray instance the run needs (the CLI passes the local launcher; the default
    uses the instance this process is already connected to). Tenants published with another
    embedding model are re-embedded first, in this process, by the local engine (which owns
    re-embedding): a Ray build never mixes two models' vectors.
    """

    name = RAY_ENGINE

    def __init__(self, catalog: Catalog, config: CitadelConfig, progress: Progress | None = None,
                 connect: Callable[[], AbstractContextManager] = nullcontext):
        self._catalog = catalog
        self._config = config
        self._progress = progress
        self._connect = connect

    def run(self, jobs: Sequence[TenantSources]) -> list[JobReport]:
        records, acl = records_from_jobs(jobs)
        if records.num_rows == 0:
            return []
        self._reembed_changed(tenants_of(records))
        with self._connect():
            return [RayIngestPipeline(self._catalog, self._config, progress=self._progress).run(records, acl)]

    def _reembed_changed(self, tenant_ids: list[str]) -> None:
        model_id, dim = embedder_identity(self._config.embedding)
        root = self._config.partitions_dir
        changed = [t for t in tenant_ids if needs_reembed(root, t, self._catalog.published_segment(t), model_id, dim)]
        if changed:
            ingestor = Ingestor(self._catalog, make_embedder(self._config.embedding), self._config, self._progress)
            for tenant_id in changed:
                ingestor.reembed(tenant_id)


def embed_stage_throughput(blocks: Sequence[pa.Table], config: CitadelConfig, batch: int, device: str = "cuda",
                           num_gpus: float = 1.0, torch_threads: int = 2) -> float:
    """Chunks/s of the embed stage inside Ray Data on one actor (benchmarks/embed_gpu_check.py): the
    rows of `blocks` (the pipeline's row shape) through `EmbedStage`, the actor's model load included.
    Runs on a local loopback Ray instance of its own."""
    from cluster.ray_local import local_ray

    with local_ray(config.ingest_pipeline):
        ray.data.DataContext.get_current().enable_progress_bars = False
        dataset = ray.data.from_arrow(list(blocks)).map_batches(
            EmbedStage, fn_constructor_kwargs={"embedding": config.embedding, "dtype": "float16",
                                               "torch_threads": torch_threads, "device": device},
            batch_size=batch, batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=1), num_gpus=num_gpus)
        started = time.perf_counter()
        rows = sum(b.num_rows for b in dataset.iter_batches(batch_format="pyarrow", batch_size=None))
        return rows / (time.perf_counter() - started)
