"""Durable ingestion jobs: an upload queued in the catalog, and the job runner that works on it under
a lease.

An upload (`queue_upload`) reserves the document's next version in the catalog, stores the raw file
under that version's immutable key (citadel/ingest/uploads.py) and hands the job to the runners; the
HTTP API answers 202 with the job id. A `JobRunner` claims the oldest queued job (or one whose
runner's lease ran out), renews its lease while it works (a heartbeat thread, and every progress
report), and finishes it through the lease:
- small uploads run in the runner's process (citadel/ingest/local.py); uploads of at least
  `jobs.ray_min_bytes` through the Ray Data pipeline where the runner has one (`Engines.large`);
- a runner that loses its lease stops at its next progress report, and always before it publishes
  (the lease is renewed, or found lost, right before the build and publish): it publishes nothing
  and writes nothing to the job, which the runner that took it over finishes;
- a retry is idempotent: the job requests the version it reserved, so its chunk ids
  (`tenant:doc:vN:NNNN`) are those of any earlier attempt; the publish is the catalog's atomic
  pointer switch under the tenant lock, so a version is published whole or not at all, and an
  attempt after a publish finds the content published (`unchanged`) rather than adding chunks;
- an attempt that raises is queued again until the job has had `jobs.max_attempts` runs; then it
  fails with the reason of its last one.
Between jobs the loop also moves tiers: every `index.tier_check_interval_s` it runs `tier_moves`
(citadel.segments.tiering.apply_tier_moves, what `citadel tiers --apply` runs), so a tenant that stops
being queried moves cold, and one queried again moves back, without anyone publishing to it; never on a
query's path. Every runner checks; the compaction decides again under the tenant's lock, so a tenant
another runner moved meanwhile is not rebuilt twice.
The loop is plain Python: the serving process runs it as a thread (`start`), a Ray cluster as one
actor per deployment (indexing/job_runner.py).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from citadel.catalog.base import ClaimedJob, JobLog, QueuedJob
from citadel.config import JobsConfig
from citadel.ingest.engine import IngestEngine, TenantSources
from citadel.ingest.objects import ObjectStore
from citadel.ingest.report import JobReport
from citadel.ingest.sources import AclSpec, DocumentSource, SourceFile, TrustedFields
from citadel.ingest.uploads import StoredRawFile, document_segment, read_raw, store_raw, version_prefix

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
# Stages an engine reports that come right before its build and publish: the lease is checked there.
BEFORE_PUBLISH_STAGES = ("build", "publish")
JOB_ACTOR = "api"
# Longest an idle runner waits between looks at the queue after claims kept failing.
MAX_BACKOFF_S = 60.0


class LeaseLost(Exception):
    """Another runner holds the job now (this one's lease ran out): stop, publish and write nothing.
    Never reaches a client: the runner catches it."""


@dataclass(frozen=True)
class UploadSpec:
    """What a queued upload's runner needs besides its raw file: as the request stated it."""

    filename: str
    groups: tuple[str, ...]
    fields: TrustedFields
    size_bytes: int
    actor: str

    @property
    def suffix(self) -> str:
        return Path(self.filename).suffix.lower()

    def to_dict(self) -> dict[str, Any]:
        return {"filename": self.filename, "groups": list(self.groups), "fields": self.fields.to_dict(),
                "size_bytes": self.size_bytes, "actor": self.actor}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "UploadSpec":
        return cls(str(values["filename"]), tuple(values.get("groups") or ()),
                   TrustedFields.from_mapping(values.get("fields") or {}), int(values.get("size_bytes") or 0),
                   str(values.get("actor") or JOB_ACTOR))


def runner_id(role: str = "runner") -> str:
    """A lease owner id, distinct per process and object: role, host, pid and a random tag."""
    return f"{role}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def queue_upload(catalog: JobLog, store: ObjectStore, owner: str, lease_s: float, now: float, tenant_id: str,
                 document_id: str, content: bytes, spec: UploadSpec) -> QueuedJob:
    """Queue one upload: reserve its version (the job leased to `owner` meanwhile), keep the raw
    file under that version's key, then hand the job to the runners. If the file cannot be stored
    the job fails at once; if the uploader dies first, a runner takes the job when the lease runs
    out and fails it (`raw_missing`)."""
    queued = catalog.queue_ingest_job(tenant_id, document_id, spec.to_dict(), owner, lease_s, now)
    try:
        store_raw(store, tenant_id, document_id, queued.version, content, spec.suffix)
    except Exception as error:
        catalog.finish_leased_job(queued.job_id, owner, "failed", _failure(queued.job_id, tenant_id, error))
        raise
    catalog.release_job(queued.job_id, owner)
    return queued


class LocalEngine(Protocol):
    """The in-process engine as the runner calls it (citadel.ingest.local.Ingestor)."""

    def ingest(self, tenant_id: str, files: Sequence[DocumentSource], acl: AclSpec, actor: str = "cli",
               job_id: str | None = None, versions: Mapping[str, int] | None = None) -> JobReport: ...


@dataclass(frozen=True)
class Engines:
    """How the runner builds its engines, each given the lease's progress callback: `local` runs a
    job in this process; `large` (None where there is no Ray) runs one through Ray Data."""

    local: Callable[[Progress], LocalEngine]
    large: Callable[[Progress], IngestEngine] | None = None


@dataclass
class JobLease:
    """One claimed job's lease, renewed as its work reports progress. `check` raises LeaseLost once
    the catalog says another runner holds the job."""

    catalog: JobLog
    job: ClaimedJob
    owner: str
    lease_s: float
    clock: Callable[[], float]
    progress: dict[str, Any] = field(default_factory=dict)
    lost: bool = False

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._renewed_at = self.clock()
        self.progress = {"stage": "claimed", "attempt": self.job.attempts, "documents_done": 0, "documents_total": 1,
                         "chunks_done": 0, "chunks_total": 0}

    def renew(self) -> None:
        """Extend the lease now (with the progress so far); LeaseLost when it is no longer ours."""
        with self._lock:
            if not self.lost:
                now = self.clock()
                self.lost = not self.catalog.renew_job_lease(self.job.job_id, self.owner, self.lease_s, now,
                                                             dict(self.progress))
                self._renewed_at = now
            if self.lost:
                raise LeaseLost(f"job {self.job.job_id}: another runner holds it now")

    def on_progress(self, stage: str, done: int, total: int) -> None:
        """An engine's progress callback: records the stage and counts, renews the lease when a third
        of it has passed, and always right before a build and publish."""
        self.progress["stage"] = stage
        if stage in ("parse", "documents"):
            self.progress.update(documents_done=done, documents_total=total)
        elif stage == "embed":
            self.progress.update(chunks_done=done, chunks_total=total)
        before_publish = stage in BEFORE_PUBLISH_STAGES and done == 0
        streamed = stage == "documents" and done == total  # Ray Data: every document read, the builds next
        if before_publish or streamed or self.clock() - self._renewed_at >= self.lease_s / 3:
            self.renew()
        elif self.lost:
            raise LeaseLost(f"job {self.job.job_id}: another runner holds it now")


class JobRunner:
    """Claims queued jobs and runs them, one at a time, under leases (module docstring).

    `workdir`: where each attempt copies its job's raw file for the engine to read (a folder of its
    own, removed after the attempt: a runner that lost the job must not delete its successor's copy).
    `on_published(tenant_id)`: called after a job published (the serving process drops the tenant's
    cached answers). `heartbeat`: renew the lease from a thread too while a job runs (off in tests
    that drive the clock). `idle_backoff`: look less often the longer the queue stays empty (the
    many embedded runners, which an upload in their own process wakes); off for the deployment's one
    runner actor, which no upload wakes, so it looks every `jobs.poll_s`. `tier_moves(now)`: moves
    the tenants whose tier changes (module docstring), run every `tier_check_interval_s` (0: never),
    the first one interval after the loop starts."""

    def __init__(self, catalog: JobLog, store: ObjectStore, engines: Engines, settings: JobsConfig, workdir: Path,
                 owner: str | None = None, clock: Callable[[], float] = time.time, heartbeat: bool = True,
                 on_published: Callable[[str], None] | None = None, idle_backoff: bool = True,
                 tier_moves: Callable[[float], Sequence[object]] | None = None, tier_check_interval_s: float = 0.0):
        self.catalog = catalog
        self.store = store
        self.engines = engines
        self.settings = settings
        self.workdir = Path(workdir)
        self.owner = owner or runner_id()
        self.clock = clock
        self.heartbeat = heartbeat
        self.on_published = on_published or (lambda tenant_id: None)
        self.idle_backoff = idle_backoff
        self.tier_moves = tier_moves if tier_check_interval_s > 0 else None
        self.tier_check_interval_s = tier_check_interval_s
        self._next_tier_check = math.inf
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the loop
    def run_once(self) -> str | None:
        """Claim one job and run it to its end (or until its lease is lost); its id, or None when
        no job was waiting."""
        job = self.catalog.claim_job(self.owner, self.settings.lease_s, self.clock())
        if job is None:
            return None
        lease = JobLease(self.catalog, job, self.owner, self.settings.lease_s, self.clock)
        if job.attempts > self.settings.max_attempts:
            self._finish(lease, "failed", {"job_id": job.job_id, "tenant_id": job.tenant_id, "status": "failed",
                                           "error": f"gave up after {self.settings.max_attempts} attempts",
                                           "last_progress": self._last_progress(job.job_id)})
            return job.job_id
        beat = self._start_heartbeat(lease) if self.heartbeat else None
        try:
            self._run(lease)
        except LeaseLost:
            log.warning("job %s: lease lost to another runner; this attempt stops without publishing", job.job_id)
        except Exception as error:
            log.exception("job %s: attempt %d failed", job.job_id, job.attempts)
            self._retry_or_fail(lease, error)
        finally:
            if beat is not None:
                beat.set()
            shutil.rmtree(self._attempt_dir(job), ignore_errors=True)
        return job.job_id

    def run_until_stopped(self) -> None:
        """Run jobs until `stop`. When none waits it looks again after `jobs.poll_s`, twice as long
        each time it finds none (unless `idle_backoff` is off), up to a third of the lease (`wake`, on
        an upload in this process, looks at once and starts over); after failed claims it backs off up
        to MAX_BACKOFF_S."""
        failures, idle = 0, 0
        if self.tier_moves is not None:
            self._next_tier_check = self.clock() + self.tier_check_interval_s
        while not self._stop.is_set():
            self._check_tiers_if_due()
            try:
                ran = self.run_once()
                failures = 0
            except Exception:  # a catalog outage must not end the runner; it backs off instead
                failures += 1
                log.warning("job runner %s: claiming a job failed (%d in a row)", self.owner, failures, exc_info=True)
                ran = None
            idle = 0 if ran is not None else (idle + 1 if self.idle_backoff else 1)
            if ran is None:
                longest = MAX_BACKOFF_S if failures else max(self.settings.poll_s, self.settings.lease_s / 3)
                backoff = min(self.settings.poll_s * 2 ** min(failures + idle - 1, 16), longest)
                woken = self._wake.wait(max(0.0, min(backoff, self._next_tier_check - self.clock())))
                self._wake.clear()
                if woken:
                    idle = 0

    def check_tiers(self) -> int:
        """Move the tenants whose tier the policy changes now; how many moved (0 when tier moves are
        off). A failure is logged, not raised: the next check tries again."""
        if self.tier_moves is None:
            return 0
        try:
            moved = len(self.tier_moves(self.clock()))
        except Exception:
            log.warning("job runner %s: the tier check failed; the next one tries again", self.owner, exc_info=True)
            return 0
        if moved:
            log.info("job runner %s: moved %d tenants to their new tier", self.owner, moved)
        return moved

    def _check_tiers_if_due(self) -> None:
        if self.clock() >= self._next_tier_check:
            self.check_tiers()
            self._next_tier_check = self.clock() + self.tier_check_interval_s

    def start(self) -> threading.Thread:
        """Run the loop on a daemon thread of this process (the embedded default)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.run_until_stopped, name="job-runner", daemon=True)
            self._thread.start()
        return self._thread

    def wake(self) -> None:
        """A job was queued: look now rather than at the next poll."""
        self._wake.set()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    # ------------------------------------------------------------------ one job
    def _run(self, lease: JobLease) -> None:
        job = lease.job
        spec = UploadSpec.from_dict(job.spec)
        try:
            raw = read_raw(self.store, job.tenant_id, job.document_id, job.version)
        except Exception as error:
            if self.store.list_prefix(version_prefix(job.tenant_id, job.document_id, job.version)):
                raise  # the store is there but failed: retried
            self._finish(lease, "failed", {**_failure(job.job_id, job.tenant_id, error), "code": "raw_missing",
                                           "error": "the upload's raw file was never stored"})
            return
        path = self._attempt_dir(job) / f"{document_segment(job.document_id)}{raw.suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw.content)
        source = SourceFile(path, job.document_id, raw.key, spec.fields)
        acl = AclSpec(documents={job.document_id: spec.groups})
        lease.renew()
        report = self._ingest(lease, spec, source, acl)
        outcome = report.to_dict()
        self._drop_unused_raw(job, outcome)
        if self._finish(lease, report.status, outcome) and outcome.get("published"):
            self.on_published(job.tenant_id)

    def _ingest(self, lease: JobLease, spec: UploadSpec, source: SourceFile, acl: AclSpec) -> JobReport:
        job = lease.job
        versions = {job.document_id: job.version}
        if self.engines.large is not None and spec.size_bytes >= self.settings.ray_min_bytes:
            lease.progress["engine"] = "ray"
            # Ray workers read the raw file by its key from the object store, so a dead letter names
            # the key, which `citadel ingest --retry-dead-letters` reads back (citadel/ingest/uploads.py).
            stored = StoredRawFile(self.store, source.source, source.document_id, source.fields)
            engine = self.engines.large(lease.on_progress)
            report = engine.run([TenantSources(job.tenant_id, (stored,), acl, versions)])[0]
            engine_job_id = report.job_id
            report.job_id, report.tenant_id = job.job_id, job.tenant_id
            lease.progress["engine_job_id"] = engine_job_id
            return report
        lease.progress["engine"] = "local"
        return self.engines.local(lease.on_progress).ingest(job.tenant_id, [source], acl, actor=spec.actor,
                                                       job_id=job.job_id, versions=versions)

    def _attempt_dir(self, job: ClaimedJob) -> Path:
        return self.workdir / f"{job.job_id}.{job.attempts}"

    def _drop_unused_raw(self, job: ClaimedJob, outcome: dict[str, Any]) -> None:
        """The reserved version keeps its raw file only if it exists (published now or by an earlier
        attempt) or was dead-lettered (for a replay): an upload that found an older version's content
        published, or was skipped, created no version, so its file goes."""
        files = outcome.get("files", [])
        if files and all(f.get("status") in ("unchanged", "skipped") and f.get("version") != job.version
                         for f in files):
            for key in self.store.list_prefix(version_prefix(job.tenant_id, job.document_id, job.version)):
                self.store.delete(key)

    def _finish(self, lease: JobLease, status: str, report: dict[str, Any]) -> bool:
        report = {**report, "progress": {**lease.progress, "stage": "done"}}
        finished = self.catalog.finish_leased_job(lease.job.job_id, self.owner, status, report)
        if not finished:
            log.warning("job %s: finished by another runner; this attempt's result is dropped", lease.job.job_id)
        return finished

    def _retry_or_fail(self, lease: JobLease, error: Exception) -> None:
        job = lease.job
        if job.attempts < self.settings.max_attempts:
            self.catalog.release_job(job.job_id, self.owner, {**lease.progress, "error": str(error)})
        else:
            self._finish(lease, "failed", _failure(job.job_id, job.tenant_id, error))

    def _last_progress(self, job_id: str) -> dict[str, Any] | None:
        return (self.catalog.get_job(job_id) or {}).get("progress")

    def _start_heartbeat(self, lease: JobLease) -> threading.Event:
        """Renew the lease every third of it until the returned event is set (or the lease is lost)."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(self.settings.lease_s / 3):
                try:
                    lease.renew()
                except LeaseLost:
                    return
                except Exception:  # a catalog blip: the next beat tries again
                    log.warning("job %s: lease renewal failed", lease.job.job_id, exc_info=True)

        threading.Thread(target=beat, name=f"lease-{lease.job.job_id}", daemon=True).start()
        return done


def job_view(row: Mapping[str, Any]) -> dict[str, Any]:
    """A job as an operator sees it (the admin API, `citadel jobs`): its row, and for a queued job
    the document and version, the attempts, the lease's expiry while a runner holds it, and its
    progress (as last renewed; its last state once done). Not the lease's owner: that names a host."""
    view = {key: row.get(key) for key in ("job_id", "tenant_id", "kind", "status", "created_at", "finished_at",
                                           "report", "document_id", "version", "attempts")}
    view["lease_expires_at"] = row.get("lease_expires_at") if row.get("state") == "leased" else None
    report = row.get("report") or {}
    view["progress"] = report.get("progress") if row.get("state") == "done" else row.get("progress")
    return view


def _failure(job_id: str, tenant_id: str, error: Exception) -> dict[str, Any]:
    return {"job_id": job_id, "tenant_id": tenant_id, "status": "failed", "error": str(error),
            "code": getattr(error, "code", "internal_error")}

