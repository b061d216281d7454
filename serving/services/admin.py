"""The admin endpoint family (DESIGN.md §3, §7): uploads that queue ingestion jobs, job status,
withdrawals and ACL changes, each scoped to the admin's tenants and run once per idempotency key.

An upload is durable before it is answered: its raw file is in the object store under its version's
key and its job in the catalog (citadel/ingest/runner.py); a job runner (a thread of this process
in the embedded default, a Ray actor on a cluster) ingests it, so a restart loses no job.

Trusted fields come from the request, never from the document: a file's front matter may title it
but never sets who reads it or what it replaces. Each write invalidates the cached answers it can
make wrong; a withdrawal also deletes the document's text everywhere under the home.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from citadel.catalog.base import Catalog
from citadel.config import CitadelConfig
from citadel.errors import Conflict, InvalidRequest, NotFound, PayloadTooLarge
from citadel.identity.credentials import ServiceIdentity
from citadel.ingest.objects import ObjectStore, make_object_store
from citadel.ingest.runner import JobRunner, UploadSpec, job_view, queue_upload, runner_id
from citadel.ingest.sources import TrustedFields
from citadel.ingest.withdrawal import withdraw_document
from citadel.state import State
from citadel.state.base import IdempotencyStatus, StateUnavailable
from citadel.tools.pause import MemoryPauseSwitch, PauseSwitch
from citadel.tools.spec import MODEL_TARGET
from serving.services.access import require_platform_admin, require_tenant
from serving.services.answer_cache import AnswerCacheView
from serving.services.failures import unavailable

UPLOAD_SUFFIXES = (".md", ".markdown", ".txt", ".pdf")


class AdminService:
    def __init__(self, config: CitadelConfig, catalog: Catalog, state: State, cache: AnswerCacheView,
                 ingestor_factory: Callable[[], Any], pauses: PauseSwitch | None = None,
                 tool_names: Callable[[], Iterable[str]] = tuple, *, objects: ObjectStore | None = None,
                 runner: JobRunner | None = None):
        """`pauses`: the pause switch; `tool_names()`: the tools an admin may pause (besides the model);
        `objects`: where raw uploads are kept (default: the config's); `runner`: this process's job
        runner, woken when a job is queued (None: a runner elsewhere, a Ray actor, works on them)."""
        self.config = config
        self.pauses = pauses or MemoryPauseSwitch()
        self._tool_names = lambda: tuple(tool_names())
        self.catalog = catalog
        self.state = state
        self.cache = cache
        self._ingestor_factory = ingestor_factory
        self.objects = objects if objects is not None else make_object_store(config)
        self.runner = runner
        self._uploader = runner_id("upload")  # the lease owner while an upload stores its raw file
        self._queued: set[str] = set()  # the jobs this process queued (what wait_for_jobs waits for)

    def idempotent(self, scope: str, key: str | None, request: dict, action: Callable[[], dict],
                   status_code: int = 200) -> tuple[dict, int]:
        """Run an admin write once per idempotency key: a replay returns the first response; the
        same key with a different request is a conflict."""
        if not key:
            return action(), status_code
        fingerprint = hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()
        store = self.state.idempotency
        try:
            started = store.begin(scope, key, fingerprint)
        except StateUnavailable as error:
            raise unavailable("state_unavailable", "the idempotency store", error) from None
        if started.status == IdempotencyStatus.DONE:
            return dict(started.response or {}), int(started.status_code or status_code)
        if started.status == IdempotencyStatus.IN_PROGRESS:
            raise Conflict("a request with this Idempotency-Key is still running", code="idempotency_in_progress")
        if started.status == IdempotencyStatus.CONFLICT:
            raise Conflict("this Idempotency-Key was used with a different request", code="idempotency_conflict")
        try:
            response = action()
        except BaseException:
            store.release(scope, key)
            raise
        store.complete(scope, key, response, status_code)
        return response, status_code

    def upload(self, admin: ServiceIdentity, tenant_id: str, document_id: str, filename: str, content: bytes,
               groups: list[str], fields: TrustedFields = TrustedFields()) -> dict:
        """Queue one document's ingestion (202): its raw file stored under the version the job
        reserved, its id, groups and trusted fields the request's."""
        require_tenant(admin, tenant_id)
        suffix = Path(filename).suffix.lower()
        if suffix not in UPLOAD_SUFFIXES:
            raise InvalidRequest(f"unsupported file type {suffix!r}; use one of {UPLOAD_SUFFIXES}")
        limit = self.config.serving.max_upload_bytes
        if len(content) > limit:
            raise PayloadTooLarge(f"document is {len(content):,} bytes; the limit is {limit:,}")
        self._check_supersedes(tenant_id, document_id, fields.supersedes)
        self.catalog.ensure_tenant(tenant_id)
        spec = UploadSpec(filename, tuple(groups), fields, len(content), admin.id)
        queued = queue_upload(self.catalog, self.objects, self._uploader, self.config.jobs.lease_s, time.time(),
                              tenant_id, document_id, content, spec)
        self._queued.add(queued.job_id)
        self.catalog.audit(admin.id, "upload", tenant_id, document_id,
                           {"job_id": queued.job_id, "bytes": len(content), "version": queued.version})
        if self.runner is not None:
            self.runner.wake()
        return {"job_id": queued.job_id, "status": "queued", "version": queued.version}

    def _check_supersedes(self, tenant_id: str, document_id: str, supersedes: str | None) -> None:
        """An upload may retire only another document of its own tenant."""
        if supersedes is None:
            return
        if supersedes == document_id or self.catalog.get_document(tenant_id, supersedes) is None:
            raise InvalidRequest(f"supersedes must name another document of tenant {tenant_id!r}; "
                                 f"{supersedes!r} is not one")

    def wait_for_jobs(self, timeout_s: float, poll_s: float = 0.02) -> None:
        """Tests and shutdown: wait (up to `timeout_s`) until every job this process queued is done."""
        deadline = time.monotonic() + timeout_s
        while self._queued and time.monotonic() < deadline:
            self._queued = {job_id for job_id in self._queued
                            if (self.catalog.get_job(job_id) or {}).get("state") not in (None, "done")}
            if self._queued:
                if self.runner is not None:
                    self.runner.wake()
                time.sleep(poll_s)

    def job(self, admin: ServiceIdentity, job_id: str) -> dict:
        """A job, only within the admin's scope: another tenant's job is 404 like a missing one, so
        job ids cannot be probed across tenants."""
        job = self.catalog.get_job(job_id)
        if job is None or not admin.may_act_for(job["tenant_id"]):
            raise NotFound(f"no job {job_id!r}")
        return job_view(job)

    def withdraw(self, admin: ServiceIdentity, tenant_id: str, document_id: str) -> dict:
        """Unreadable at once, then deleted: its partition rows, raw upload, cached and logged answers
        (citadel/ingest/withdrawal.py). Returns once nothing under the home holds its text."""
        require_tenant(admin, tenant_id)
        self._known_document(tenant_id, document_id)
        report = withdraw_document(self.catalog, self._ingestor_factory(), self.config.home,
                                   self.config.partitions_dir, tenant_id, document_id, admin.id,
                                   invalidate_cache=self.cache.invalidate, objects=self.objects)
        return {"tenant_id": tenant_id, "document_id": document_id, "status": report.status,
                "deleted": {"raw_files": report.raw_files_deleted, "answers": report.answers_forgotten}}

    def set_acl(self, admin: ServiceIdentity, tenant_id: str, document_id: str, groups: list[str]) -> dict:
        require_tenant(admin, tenant_id)
        self._known_document(tenant_id, document_id)
        acl_version = self.catalog.set_acl(tenant_id, document_id, groups, admin.id)
        # A grant can make an earlier refusal wrong, and refusals cite no document: drop the tenant's cache.
        self.cache.invalidate(tenant_id)
        return {"tenant_id": tenant_id, "document_id": document_id, "groups": sorted(groups),
                "acl_version": acl_version}

    # ------------------------------------------------------------------ the pause switch
    def tools(self, admin: ServiceIdentity) -> dict:
        """The registry's tools (and the model) with the pauses this admin may see."""
        names = [MODEL_TARGET, *self._tool_names()]
        pauses = [p for p in self.pauses.paused() if p.tenant_id is None or admin.may_act_for(p.tenant_id)]
        return {"targets": names, "pauses": [{"target": p.target, "tenant_id": p.tenant_id, "paused_at": p.paused_at}
                                             for p in pauses]}

    def pause(self, admin: ServiceIdentity, target: str, tenant_id: str | None) -> dict:
        """Pause a tool or the model for one tenant, or everywhere (platform admins only), at once:
        every process sees it on its next call (no restart)."""
        self._pausable(admin, target, tenant_id)
        self.pauses.pause(tenant_id, target)
        return {"target": target, "tenant_id": tenant_id, "paused": True}

    def resume(self, admin: ServiceIdentity, target: str, tenant_id: str | None) -> dict:
        self._pausable(admin, target, tenant_id)
        self.pauses.resume(tenant_id, target)
        return {"target": target, "tenant_id": tenant_id, "paused": False}

    def _pausable(self, admin: ServiceIdentity, target: str, tenant_id: str | None) -> None:
        if tenant_id is None:
            require_platform_admin(admin)
        else:
            require_tenant(admin, tenant_id)
        if target != MODEL_TARGET and target not in self._tool_names():
            raise NotFound(f"no tool {target!r}")

    def _known_document(self, tenant_id: str, document_id: str) -> None:
        if self.catalog.get_document(tenant_id, document_id) is None:
            raise NotFound(f"tenant {tenant_id!r} has no document {document_id!r}")

