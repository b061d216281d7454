"""The Catalog interface, so Postgres can replace SQLite (DESIGN.md §3), as narrow roles.

Each role is a Protocol of its own, so a consumer that needs one role takes that role:
- `PermissionSource`: the live permission check (what a principal may read now; a document's record).
- `Publisher`: tenants, documents and versions, the atomic publish, ACL changes and withdrawals.
- `JobLog`: ingestion jobs and their dead letters.
- `AuditLog`: appends an audit row.
- `AnswerLog`: the answer log and the feedback on answers.
- `CandidateQueue`: candidate test items waiting for an owner's label.
- `GovernanceRegistry`: documents by the catalog's governance (a policy's current version by its id,
  the documents a retention class has expired).
- `TrafficLog`: queries per tenant per day and the tier each partition entered when (tiering by size
  and traffic, citadel/segments/tiering.py).
`Catalog` is their union (and `close`): what both backends (citadel/catalog/sqlite.py, postgres.py)
implement and what the composition root hands out. Its one failure is `CatalogUnavailable` (any
database error, so callers fail closed without knowing the database); writes to a document that does
not exist raise `NotFound`; a tenant id that is not a plain name raises `InvalidTenant`.
`CatalogAudit`: what the catalog recorded, read back (chunk manifests, the audit log, the answer
log). No request or ingestion path reads these; operators, audits and tests do, and every backend
keeps them, so tests/conformance/test_catalog_backends.py checks both on each backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, runtime_checkable

from citadel.errors import CitadelError
from citadel.types import DocumentMeta, Governance, Principal

# The only status under which re-ingesting identical content is a no-op.
PUBLISHED_STATUS = "published"
# What the answer log holds in place of a question withheld for sensitive data
# (citadel/guardrails/redaction.py decides which), and the router's reason for such a refusal.
WITHHELD_QUESTION = "[withheld: sensitive data]"
SENSITIVE_DATA_REASON = "sensitive_data"
# Candidate test items: their statuses, and the most rows one read returns.
CANDIDATE_PENDING, CANDIDATE_PROMOTED, CANDIDATE_DISMISSED = "pending", "promoted", "dismissed"
CANDIDATES_READ_LIMIT = 1_000


@dataclass(frozen=True)
class DocumentRecord:
    tenant_id: str
    document_id: str
    title: str
    source: str
    owner: str
    visibility: str
    effective_date: str | None
    supersedes: str | None
    status: str
    published_version: int | None
    latest_version: int
    acl_version: int
    groups: tuple[str, ...]
    governance: Governance = Governance()  # the published version's (citadel.types.Governance)


@dataclass(frozen=True)
class ReadableDoc:
    """A document version the principal may read right now."""

    document_id: str
    version: int
    title: str
    source: str


@dataclass(frozen=True)
class StagedVersion:
    """A document version written beside the published one, waiting for the pointer switch."""

    meta: DocumentMeta
    version: int
    content_hash: str
    chunk_ids: tuple[str, ...]
    chunk_hashes: tuple[str, ...]


@dataclass(frozen=True)
class LatestVersion:
    """The newest recorded version of one document: what decides the next upload's version."""

    version: int
    content_hash: str
    status: str


def decide_next_version(
    document_id: str, latest: LatestVersion | None, content_hash: str, requested: int | None = None
) -> tuple[int, bool]:
    """The version a new upload gets, and whether it is the published content already.

    Re-ingesting identical content is a no-op (idempotent retries); versions are monotonic. Pure, so
    the catalog and a snapshot of it (the Ray pipeline's parse workers) decide identically.
    """
    if latest is None:
        return (requested or 1), False
    if latest.content_hash == content_hash and latest.status == PUBLISHED_STATUS:
        return latest.version, True
    if requested is not None:
        if requested <= latest.version:
            raise CitadelError(
                f"{document_id}: version {requested} is not newer than the latest ({latest.version})",
                code="stale_version",
            )
        return requested, False
    return latest.version + 1, False


@runtime_checkable
class PermissionSource(Protocol):
    """The live permission check: the retriever, the answer cache and the gateway's checks read it."""

    def readable_documents(self, principal: Principal) -> dict[str, ReadableDoc]:
        """Document id → the version the principal may read now: published, not superseded or
        withdrawn, and tenant-wide or shared with one of the principal's groups."""
    def get_document(self, tenant_id: str, document_id: str) -> DocumentRecord | None: ...


@runtime_checkable
class Publisher(Protocol):
    """Tenants, documents and versions, and the writes that change what is published."""

    # tenants
    def ensure_tenant(self, tenant_id: str) -> None: ...
    def list_tenants(self) -> list[dict[str, Any]]: ...

    # documents and versions
    def next_version(self, tenant_id: str, document_id: str, content_hash: str,
                     requested: int | None = None) -> tuple[int, bool]: ...
    def latest_versions(self, tenant_ids: list[str]) -> dict[tuple[str, str], LatestVersion]: ...
    def list_documents(self, tenant_id: str) -> list[DocumentRecord]: ...

    # publishing
    def published_segment(self, tenant_id: str) -> str | None: ...
    def publish(
        self, tenant_id: str, segment_id: str, tier: str, staged: list[StagedVersion], job_id: str
    ) -> None:
        """The atomic pointer switch: the staged versions, the documents they supersede, their ACLs
        and the tenant's segment pointer change together or not at all."""

    # ACL changes and withdrawals (effective on the next permission check)
    def set_acl(self, tenant_id: str, document_id: str, groups: list[str], actor: str) -> int:
        """Replace the groups ("*" = tenant-wide); returns the new acl_version. Audited."""
    def withdraw(self, tenant_id: str, document_id: str, actor: str) -> None: ...


@dataclass(frozen=True)
class QueuedJob:
    """A queued ingestion job and the document version it reserved."""

    job_id: str
    version: int


@dataclass(frozen=True)
class ClaimedJob:
    """A queued job as the runner that claimed it sees it (citadel/ingest/runner.py)."""

    job_id: str
    tenant_id: str
    document_id: str
    version: int
    spec: dict[str, Any]
    attempts: int  # runs so far, this one included


@runtime_checkable
class JobLog(Protocol):
    """Ingestion jobs and the sources they could not ingest (dead letters).

    Queued jobs (an upload's: citadel/ingest/runner.py) are worked on under a lease: a runner claims
    one for `lease_s`, renews it while it works and finishes it through it; every lease write names
    its owner and does nothing (returns False) once another owner holds the job, so a runner that
    lost its lease can neither renew nor finish it. A job the queue holds is finished only through
    its lease: `finish_job` leaves it alone."""

    def create_job(self, tenant_id: str, kind: str) -> str: ...
    def finish_job(self, job_id: str, status: str, report: dict[str, Any]) -> None: ...
    def get_job(self, job_id: str) -> dict[str, Any] | None:
        """The job's row (report as a dict); a queued job's also has document_id, version, state,
        owner, lease_expires_at, attempts and progress (a dict or None)."""
    def list_jobs(self, tenant_ids: list[str] | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The newest `limit` jobs (of these tenants), newest first, rows as `get_job` gives them."""
    def job_counts(self) -> dict[str, int]:
        """How many jobs of every tenant there are in each status (the metrics read it at scrape time)."""
    def queue_ingest_job(self, tenant_id: str, document_id: str, spec: dict[str, Any], owner: str,
                         lease_s: float, now: float) -> QueuedJob:
        """Record an ingestion job of one document and reserve its version (above every version the
        catalog recorded or a job reserved), leased to `owner` (the uploader, while it stores the raw
        file) until `now + lease_s`; `release_job` then hands it to the runners."""
    def claim_job(self, owner: str, lease_s: float, now: float) -> ClaimedJob | None:
        """The oldest job that is queued, or leased with its lease run out, now leased to `owner`
        until `now + lease_s` (its attempts counted); None when there is none. Two runners never
        claim one job at once."""
    def renew_job_lease(self, job_id: str, owner: str, lease_s: float, now: float,
                        progress: dict[str, Any] | None = None) -> bool:
        """Extend the owner's lease to `now + lease_s` and record its progress; False when the job is
        no longer the owner's."""
    def release_job(self, job_id: str, owner: str, progress: dict[str, Any] | None = None) -> bool:
        """Queue the owner's job again for any runner (after the upload stored its file, or after an
        attempt that failed and may be retried); False when the job is no longer the owner's."""
    def finish_leased_job(self, job_id: str, owner: str, status: str, report: dict[str, Any]) -> bool:
        """Finish the owner's job with its status and report; False (nothing written) when the job
        is no longer the owner's."""
    def add_dead_letter(self, job_id: str, tenant_id: str, source: str, code: str, reason: str,
                        meta: dict[str, Any]) -> int: ...
    def dead_letters(self, tenant_id: str | None = None, include_retried: bool = False) -> list[dict[str, Any]]: ...
    def mark_dead_letter_retried(self, dead_letter_id: int) -> None: ...


@runtime_checkable
class AuditLog(Protocol):
    """Appends who did what (read back through CatalogAudit.audit_log)."""

    def audit(self, actor: str, action: str, tenant_id: str, target: str, detail: dict[str, Any]) -> None: ...


@runtime_checkable
class AnswerLog(Protocol):
    """The answer log and the feedback on answers."""

    # the answer log: append-only rows keyed by a server row id; deleted only by the retention purge
    # and by a withdrawal (the rows citing the withdrawn document)
    def log_answer(self, request_id: str, tenant_id: str, user_id: str, question: str, response: dict[str, Any],
                   correlation_id: str | None = None, cached: bool = False) -> int: ...
    def purge_answers(self, older_than_s: float) -> int:
        """Delete answer-log rows older than `older_than_s` seconds; returns how many."""
    def forget_answers_citing(self, tenant_id: str, document_id: str) -> int:
        """Delete the tenant's answer-log rows whose answer cites this document (and so may quote it;
        a withdrawal deletes it, citadel/ingest/withdrawal.py), and the candidate test items whose
        answer cites it; returns how many answer-log rows. The deleted text is overwritten where the
        backend can (SQLite: secure_delete, WAL truncated)."""
    def answer_entry(self, request_id: str, tenant_id: str, user_id: str) -> dict[str, Any] | None:
        """The newest answer-log row of this request id that belongs to this tenant and user (None
        otherwise: another user's answer looks missing)."""

    # feedback on answers: append-only, with the sources and versions the answer cited
    def record_feedback(self, answer_id: str, tenant_id: str, user_id: str, vote: str, reason: str | None,
                        comment: str, sources: list[dict[str, Any]]) -> int: ...
    def feedback(self, tenant_id: str) -> list[dict[str, Any]]:
        """The tenant's feedback rows, oldest first, `sources` as a list."""


@runtime_checkable
class CandidateQueue(Protocol):
    """Candidate test items waiting for an owner's label (citadel/quality/candidates.py). A row is a
    dict: id, tenant_id, source, origin, status, item (dict), label (dict or None), created_at,
    decided_at, decided_by."""

    def queue_candidate(self, tenant_id: str, source: str, origin: str, item: dict[str, Any],
                        max_pending: int) -> int | None:
        """Queue a pending candidate; returns its id. The same (tenant, source, origin) is queued once:
        again, the first row's id comes back and nothing changes. None (nothing queued) when the
        tenant's source already holds `max_pending` pending candidates."""
    def candidates(self, tenant_id: str, source: str | None = None, status: str | None = None,
                   limit: int = CANDIDATES_READ_LIMIT, after_id: int = 0) -> list[dict[str, Any]]:
        """The tenant's candidates (of one source, in one status) with an id above `after_id` (paging),
        the oldest `limit` first."""
    def candidate(self, candidate_id: int) -> dict[str, Any] | None: ...
    def decide_candidate(self, candidate_id: int, status: str, label: dict[str, Any] | None,
                         actor: str) -> dict[str, Any] | None:
        """A pending candidate promoted (with its label) or dismissed, once, and audited in the same
        transaction; returns the row as decided, None when no pending candidate has this id."""


@dataclass(frozen=True)
class ExpiredDocument:
    """A document its retention class no longer keeps: the purge withdraws it."""

    tenant_id: str
    document_id: str
    retention_class: str


@runtime_checkable
class GovernanceRegistry(Protocol):
    """Documents by the governance the catalog states of their published version."""

    def current_policy(self, tenant_id: str, policy_id: str) -> DocumentRecord | None:
        """The tenant's published document carrying this policy id (the most recently published one
        if several do): the policy's current approved revision, whoever asks. No permission check:
        citadel/catalog/policies.py checks the caller's."""
    def expired_documents(self, retention_days: dict[str, float], now: float, limit: int) -> list[ExpiredDocument]:
        """Documents not yet withdrawn whose published version's retention class (a key of
        `retention_days`) has run out by `now` (epoch seconds), counted from the effective date
        when there is one, else from when the version was published; at most `limit`."""


@dataclass(frozen=True)
class TierEntry:
    """The tier a tenant's published partition is in, and when it entered it (epoch seconds)."""

    tier: str
    entered_at: float


@runtime_checkable
class TrafficLog(Protocol):
    """What tiering reads (citadel/segments/tiering.py): the queries each tenant's partition served per
    UTC day (`day` = floor(epoch seconds / 86400)), added to by every serving replica, and the tier
    each partition entered at a publish, and when (a publish in the same tier keeps the time)."""

    def record_queries(self, day: int, counts: Mapping[str, int], keep_days: int) -> None:
        """Add `counts` (tenant → queries) to the tenants' rows of `day`, and delete the rows of days
        before `day - keep_days + 1`: one row per tenant per day, the window's days only."""
    def queries_since(self, tenant_ids: list[str], first_day: int) -> dict[str, int]:
        """Queries per tenant over the days from `first_day` on (tenants with none are absent)."""
    def tier_entries(self, tenant_ids: list[str]) -> dict[str, TierEntry]:
        """The tier of each published tenant among these, and when it entered it."""


@runtime_checkable
class Catalog(PermissionSource, Publisher, JobLog, AuditLog, AnswerLog, CandidateQueue, GovernanceRegistry,
              TrafficLog, Protocol):
    """Every role: what both backends implement and the composition root hands out."""

    def close(self) -> None: ...


@runtime_checkable
class CatalogAudit(Protocol):
    def manifest(self, tenant_id: str, document_id: str, version: int) -> list[str]:
        """The chunk ids of one document version, sorted."""
    def document_chunk_ids(self, tenant_id: str, document_id: str) -> set[str]:
        """The chunk ids of every recorded version of the document (what a withdrawal must delete)."""
    def audit_log(self, tenant_id: str | None = None) -> list[dict[str, Any]]:
        """Audit rows (actor, action, tenant_id, target, detail as a dict), oldest first."""
    def answer_log(self, tenant_id: str | None = None, limit: int = 1_000,
                   since: float | None = None) -> list[dict[str, Any]]:
        """The newest `limit` answer-log rows (of one tenant; logged at or after `since`, epoch seconds),
        oldest first."""
