"""The gateway's work, as plain Python (no Ray, no FastAPI): identity, budgets, the ACL-scoped answer
cache, the query stages and the admin writes (DESIGN.md §4, §7).

The HTTP layer (serving/api.py) calls these synchronous methods on worker threads; whether the stages
run in this process (fused topology) or in other deployments (split) is decided by what was injected.
Every method raises `ApiError` for anything the caller should see, never a bare exception.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from citadel.answer.service import RERANK_SKIPPED, AnswerService
from citadel.catalog.base import Catalog
from citadel.config import CitadelConfig
from citadel.errors import CitadelError, EmbeddingModelMismatch
from citadel.identity.authenticator import Authenticator
from citadel.identity.credentials import ServiceIdentity
from citadel.resilience.breaker import BreakerOpen
from citadel.resilience.guards import Guard, PermissionsUnavailable
from citadel.sources import AclSpec, SourceFile, TrustedFields
from citadel.state import State
from citadel.state.base import StateUnavailable, answer_cache_key
from citadel.types import Principal
from serving.errors import ApiError
from serving.metrics import ApiMetrics
from serving.resilience import set_deadline
from citadel.tracing import emit_span, emit_stage_spans
from citadel.guardrails.router import SENSITIVE_DATA

log = logging.getLogger(__name__)

CACHE_UNAVAILABLE = "cache_unavailable"
UPLOAD_SUFFIXES = (".md", ".markdown", ".txt", ".pdf")
# Rough tokens per word, to estimate a request's cost before it runs (the budget charges up front).
TOKENS_PER_WORD = 1.3
TOKENS_PER_THOUSAND = 1000.0
# Failures of the permission store: the request fails closed (503), never with unchecked passages.
PERMISSION_STORE_ERRORS = (sqlite3.Error, OSError, PermissionsUnavailable)


@dataclass
class Caller:
    """Who is asking: the authenticated service and the verified end user."""

    service: ServiceIdentity
    principal: Principal


class Gateway:
    def __init__(self, config: CitadelConfig, catalog: Catalog, authenticator: Authenticator, state: State,
                 answers: AnswerService, retriever, ingestor_factory: Callable[[], Any],
                 metrics: ApiMetrics | None = None, cache_guard: Guard | None = None):
        self.config = config
        self.catalog = catalog
        self.authenticator = authenticator
        self.state = state
        self.answers = answers
        self.retriever = retriever
        self._ingestor_factory = ingestor_factory
        self.metrics = metrics or ApiMetrics()
        self._cache_guard = cache_guard or Guard()
        self._jobs: dict[str, threading.Thread] = {}

    # ------------------------------------------------------------------ identity
    def caller(self, authorization: str | None, user_context: str | None) -> Caller:
        """401 before anything else runs; the principal comes only from the signed context."""
        try:
            service, principal = self.authenticator.authenticate(authorization, user_context)
        except CitadelError as error:
            raise ApiError(error.code, str(error)) from None
        return Caller(service, principal)

    def admin(self, authorization: str | None) -> ServiceIdentity:
        """An admin credential carrying its scope; each admin action then checks the tenant it touches."""
        try:
            return self.authenticator.require_admin(authorization)
        except CitadelError as error:
            raise ApiError(error.code, str(error)) from None

    @staticmethod
    def _require_tenant(admin: ServiceIdentity, tenant_id: str) -> None:
        """Every admin action on a tenant: a tenant admin acts only in its own tenants."""
        if not admin.may_act_for(tenant_id):
            raise ApiError("tenant_not_allowed", f"admin {admin.id!r} may not act in tenant {tenant_id!r}")

    @staticmethod
    def _require_platform_admin(admin: ServiceIdentity) -> None:
        """Platform-wide actions (fault injection affects every tenant): platform admins only."""
        if not admin.platform_admin:
            raise ApiError("platform_admin_required", f"admin {admin.id!r} is not a platform (all-tenant) admin")

    # ------------------------------------------------------------------ budgets
    def charge(self, principal: Principal, text: str) -> None:
        """Charge one request and its estimated cost, before any work. Budgets guard spending, so an
        unreachable store refuses (fails closed) rather than letting requests through uncounted."""
        cost = self._estimated_cost(text)
        try:
            decision = self.state.budgets.charge(principal.tenant_id, principal.user_id, 1, cost)
        except StateUnavailable as error:
            raise _unavailable("state_unavailable", "the budget store", error) from None
        if not decision.allowed:
            self.metrics.budget_rejected(principal.tenant_id)
            raise ApiError("budget_exhausted", decision.reason or "budget exhausted", decision.retry_after_s)

    def _estimated_cost(self, text: str) -> float:
        answer = self.config.answer
        tokens = len(text.split()) * TOKENS_PER_WORD + answer.total_token_budget + answer.max_new_tokens
        return tokens / TOKENS_PER_THOUSAND * self.config.state.cost_per_1k_tokens

    # ------------------------------------------------------------------ retrieve
    def retrieve(self, caller: Caller, query: str, top_k: int, request_id: str,
                 correlation_id: str | None = None) -> dict:
        set_deadline(self.config.serving.request_timeout_s)  # every downstream call is bounded by it
        principal = caller.principal
        self.charge(principal, query)
        started = time.perf_counter()
        with _failing_closed():
            result = self.retriever.retrieve(principal, query, top_k=top_k, request_id=request_id)
        self.metrics.stage_latency.labels("retrieve").observe(time.perf_counter() - started)
        chunk_ids = [p.chunk_id for p in result.passages]
        emit_stage_spans(request_id, result.timings_ms, {"recheck": chunk_ids}, correlation_id=correlation_id)
        self.metrics.observe_stages(result.timings_ms)
        for what in result.degraded:
            self.metrics.degraded.labels(what).inc()
        body = result.to_dict()
        body["request_id"] = request_id
        return body

    # ------------------------------------------------------------------ answer
    def answer(self, caller: Caller, question: str, request_id: str, correlation_id: str | None = None) -> dict:
        """One answer; every one, cache hits included, is a row of the answer log (the question
        withheld when it holds sensitive data)."""
        set_deadline(self.config.serving.request_timeout_s)  # every downstream call is bounded by it
        principal = caller.principal
        self.charge(principal, question)
        degraded: list[str] = []
        with _failing_closed():
            segment = self.catalog.published_segment(principal.tenant_id) or "none"
            key = answer_cache_key(principal.tenant_id, principal.acl_signature, question, segment)
            cached = self._cached_answer(key, principal, degraded)  # a hit is live-checked in the catalog
        if cached is not None:
            self.metrics.cache.labels("hit").inc()
            emit_span(request_id, "cache", 0.0, [c["chunk_id"] for c in cached["citations"]], hit=True,
                      correlation_id=correlation_id)
            body = {**cached, "request_id": request_id, "degraded": degraded, "cached": True}
            with _failing_closed():
                self.answers.log_cache_hit(principal, question, body, correlation_id)
            return body
        with _failing_closed():
            response = self.answers.ask(principal, question, request_id=request_id, correlation_id=correlation_id)
        body = response.to_dict()
        body["degraded"] = [*body["degraded"], *degraded]
        self._record_answer(request_id, response, body, correlation_id)
        # A transient downgrade is not kept; nor is a refusal of sensitive data (its key derives from the secret).
        if not set(body["degraded"]) - self._configured_downgrades() and body["reason"] != SENSITIVE_DATA:
            self._store_answer(key, principal.tenant_id, body, body["degraded"])
        return {**body, "cached": False}

    def _configured_downgrades(self) -> set[str]:
        """Downgrades that every answer carries by configuration (reranking turned off), which a
        later request would carry as well: they do not stop an answer being cached."""
        return {RERANK_SKIPPED} if self.config.answer.reranker == "none" else set()

    def _record_answer(self, request_id: str, response, body: dict, correlation_id: str | None = None) -> None:
        self.metrics.observe_stages({k: v for k, v in response.timings_ms.items() if k != "total"})
        if body["refused"]:
            self.metrics.refusals.labels(body["reason"] or "unknown").inc()
        for what in body["degraded"]:
            self.metrics.degraded.labels(what).inc()
        chunks = {"rerank": [p.chunk_id for p in response.passages],
                  "validate": [c["chunk_id"] for c in body["citations"]]}
        emit_stage_spans(request_id, response.timings_ms, chunks, correlation_id=correlation_id)

    def _cached_answer(self, key: str, principal: Principal, degraded: list[str]) -> dict | None:
        """A cached answer, served only if every document it cites is still readable by this
        principal at the cited version (the live check applies to cached passages too)."""
        if not self.config.state.answer_cache_enabled:
            return None
        try:
            cached = self._cache_guard.call(self.state.cache.get, key)
        except (StateUnavailable, BreakerOpen):
            degraded.append(CACHE_UNAVAILABLE)  # the cache fails open, visibly
            self.metrics.cache.labels("error").inc()
            return None
        if cached is None:
            self.metrics.cache.labels("miss").inc()
            return None
        readable = self.catalog.readable_documents(principal)
        for citation in cached["citations"]:
            current = readable.get(citation["document_id"])
            if current is None or current.version != citation["version"]:
                self.metrics.cache.labels("stale").inc()
                return None
        return cached

    def _store_answer(self, key: str, tenant_id: str, body: dict, degraded: list[str]) -> None:
        if not self.config.state.answer_cache_enabled:
            return
        documents = {c["document_id"] for c in body["citations"]}
        value = {k: body[k] for k in ("answer", "refused", "reason", "citations")}
        try:
            self._cache_guard.call(self.state.cache.put, key, value, tenant_id, documents)
        except (StateUnavailable, BreakerOpen):
            degraded.append(CACHE_UNAVAILABLE)

    def _invalidate(self, tenant_id: str, document_ids: list[str] | None = None) -> None:
        """After a write, drop cached answers that used the documents (refusals cite nothing, so
        the tenant's whole cache goes when a document becomes newly visible)."""
        try:
            if document_ids is None:
                self.state.cache.invalidate_tenant(tenant_id)
            else:
                self.state.cache.invalidate_documents(tenant_id, document_ids)
        except StateUnavailable:
            log.warning("answer cache unreachable; entries for %s expire by TTL", tenant_id)

    # ------------------------------------------------------------------ admin writes
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
            raise _unavailable("state_unavailable", "the idempotency store", error) from None
        if started.status == "done":
            return dict(started.response or {}), int(started.status_code or status_code)
        if started.status == "in_progress":
            raise ApiError("idempotency_in_progress", "a request with this Idempotency-Key is still running")
        if started.status == "conflict":
            raise ApiError("idempotency_conflict", "this Idempotency-Key was used with a different request")
        try:
            response = action()
        except BaseException:
            store.release(scope, key)
            raise
        store.complete(scope, key, response, status_code)
        return response, status_code

    def upload(self, admin: ServiceIdentity, tenant_id: str, document_id: str, filename: str, content: bytes,
               groups: list[str], fields: TrustedFields = TrustedFields()) -> dict:
        """Start ingesting one document. Its id, groups and trusted fields are the request's; the
        file's front matter may title it but never sets who reads it or what it replaces."""
        self._require_tenant(admin, tenant_id)
        actor = admin.id
        suffix = Path(filename).suffix.lower()
        if suffix not in UPLOAD_SUFFIXES:
            raise ApiError("invalid_request", f"unsupported file type {suffix!r}; use one of {UPLOAD_SUFFIXES}")
        if len(content) > self.config.serving.max_upload_bytes:
            raise ApiError("payload_too_large",
                           f"document is {len(content):,} bytes; the limit is {self.config.serving.max_upload_bytes:,}")
        self._check_supersedes(tenant_id, document_id, fields.supersedes)
        self.catalog.ensure_tenant(tenant_id)
        job_id = self.catalog.create_job(tenant_id, "ingest")
        path = self.config.home / "uploads" / tenant_id / job_id / f"{_safe_name(document_id)}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        self.catalog.audit(actor, "upload", tenant_id, document_id, {"job_id": job_id, "bytes": len(content)})
        thread = threading.Thread(target=self._ingest, name=f"ingest-{job_id}", daemon=True,
                                  args=(job_id, tenant_id, document_id, path, groups, fields))
        self._jobs[job_id] = thread
        thread.start()
        return {"job_id": job_id, "status": "running"}

    def _check_supersedes(self, tenant_id: str, document_id: str, supersedes: str | None) -> None:
        """An upload may retire only another document of its own tenant."""
        if supersedes is None:
            return
        if supersedes == document_id or self.catalog.get_document(tenant_id, supersedes) is None:
            raise ApiError("invalid_request",
                           f"supersedes must name another document of tenant {tenant_id!r}; {supersedes!r} is not one")

    def _ingest(self, job_id: str, tenant_id: str, document_id: str, path: Path, groups: list[str],
                fields: TrustedFields) -> None:
        try:
            ingestor = self._ingestor_factory()
            acl = AclSpec(documents={document_id: tuple(groups)})
            ingestor.ingest(tenant_id, [SourceFile(path, document_id, path.name, fields)], acl, actor="api",
                            job_id=job_id)
            self._invalidate(tenant_id)
        except Exception:  # the job row says failed with the error; the thread must not die loudly
            log.exception("ingestion job %s failed", job_id)
        finally:
            self._jobs.pop(job_id, None)

    def wait_for_jobs(self, timeout_s: float) -> None:
        """Tests and shutdown: let running ingestion threads finish."""
        deadline = time.monotonic() + timeout_s
        for thread in list(self._jobs.values()):
            thread.join(max(0.0, deadline - time.monotonic()))

    def job(self, admin: ServiceIdentity, job_id: str) -> dict:
        """A job, only within the admin's scope: another tenant's job is 404 like a missing one, so
        job ids cannot be probed across tenants."""
        job = self.catalog.get_job(job_id)
        if job is None or not admin.may_act_for(job["tenant_id"]):
            raise ApiError("not_found", f"no job {job_id!r}")
        return job

    def withdraw(self, admin: ServiceIdentity, tenant_id: str, document_id: str) -> dict:
        self._require_tenant(admin, tenant_id)
        self._known_document(tenant_id, document_id)
        self.catalog.withdraw(tenant_id, document_id, admin.id)
        self._invalidate(tenant_id, [document_id])
        return {"tenant_id": tenant_id, "document_id": document_id, "status": "withdrawn"}

    def set_acl(self, admin: ServiceIdentity, tenant_id: str, document_id: str, groups: list[str]) -> dict:
        self._require_tenant(admin, tenant_id)
        self._known_document(tenant_id, document_id)
        acl_version = self.catalog.set_acl(tenant_id, document_id, groups, admin.id)
        # A grant can make an earlier refusal wrong, and refusals cite no document: drop the tenant's cache.
        self._invalidate(tenant_id)
        return {"tenant_id": tenant_id, "document_id": document_id, "groups": sorted(groups),
                "acl_version": acl_version}

    # ------------------------------------------------------------------ drills
    def _faults(self, admin: ServiceIdentity):
        self._require_platform_admin(admin)
        if not self.config.serving.fault_injection:
            raise ApiError("fault_injection_disabled",
                           "fault injection is off; enable serving.fault_injection for drills")
        from serving.resilience import fault_store

        return fault_store(self.config)

    def set_fault(self, admin: ServiceIdentity, spec: dict) -> dict:
        from citadel.drills import FaultSpec

        store = self._faults(admin)
        actor = admin.id
        try:
            fault = FaultSpec.model_validate(spec)
        except ValueError as error:
            raise ApiError("invalid_request", str(error)) from None
        saved = store.set(fault)
        self.catalog.audit(actor, "fault_set", "-", fault.stage, saved.model_dump())
        log.warning("drill: fault set on %s by %s: %s", fault.stage, actor, saved.model_dump())
        return saved.model_dump()

    def clear_fault(self, admin: ServiceIdentity, stage: str) -> dict:
        self._faults(admin).clear(stage)
        self.catalog.audit(admin.id, "fault_clear", "-", stage, {})
        log.warning("drill: fault on %s cleared by %s", stage, admin.id)
        return {"stage": stage, "cleared": True}

    def list_faults(self, admin: ServiceIdentity) -> dict:
        return {"faults": [f.model_dump() for f in self._faults(admin).list()]}

    def _known_document(self, tenant_id: str, document_id: str) -> None:
        if self.catalog.get_document(tenant_id, document_id) is None:
            raise ApiError("not_found", f"tenant {tenant_id!r} has no document {document_id!r}")


@contextmanager
def _failing_closed() -> Iterator[None]:
    """Any failure of the permission store inside the block is a 503, never a 500 and never an
    unchecked passage."""
    try:
        yield
    except PERMISSION_STORE_ERRORS as error:
        raise _unavailable("permissions_unavailable", "the permission store", error) from None
    except EmbeddingModelMismatch as error:  # the tenant awaits re-embedding: a clear 503, never a 500
        log.warning("refused a search across embedding models: %s", error)  # the details stay in the log
        raise ApiError(error.code, "this tenant's index was embedded with another model than the queries and is "
                                   "not searched until it is re-embedded (`citadel reembed`)") from None


def _unavailable(code: str, store: str, error: BaseException) -> ApiError:
    """The error a caller sees when a store fails: a code and a generic message. The details (a
    Redis host:port, a SQLite message or path) go to the server log only, under the code."""
    log.warning("%s: %s unavailable: %s: %s", code, store, type(error).__name__, error)
    return ApiError(code, f"{store} is unavailable; try again shortly")


def _safe_name(document_id: str) -> str:
    """A file name for an uploaded document: its id with anything but [A-Za-z0-9._-] replaced."""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in document_id)
    return cleaned.strip(".") or uuid.uuid4().hex
