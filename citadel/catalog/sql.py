"""The catalog's SQL, written once for both backends (SQLite and Postgres), behind a dialect seam.

`SQLCatalog` holds every statement of the Catalog protocol; `sqlite.py` and `postgres.py` subclass it
and keep only what truly differs: opening connections and transactions, mapping their driver's errors,
and a `Dialect` for the few fragments the two databases spell differently:
- placeholders: statements are written with `?`; Postgres's dialect turns them into `%s`;
- a list parameter: `IN (?, ?, ...)` on SQLite, `= ANY(?)` (one array) on Postgres;
- a correlated list column (a document's groups): `json_group_array` on SQLite, `ARRAY(...)` on Postgres;
- "this JSON column's array holds an item citing document X": `json_each` on SQLite, a jsonpath on
  Postgres;
- serialising one tenant's writes: SQLite's `BEGIN IMMEDIATE` already serialises every writer, Postgres
  takes a transaction-scoped advisory lock on the tenant.
Everything else (upserts with `ON CONFLICT ... DO UPDATE`, `RETURNING`, `CAST(? AS TEXT) IS NULL`) is
SQL both accept (SQLite from 3.35).

Why a dialect seam and not SQLAlchemy Core: SQLAlchemy is not a dependency today, and Core would
rewrite every statement into its expression language (a behaviour risk on the permission source,
for no gain in what the statements say) while still needing hand-written dialect text for the JSON
and advisory-lock fragments above; its import would also land in every serving and test process.
The differences are five small fragments; the seam states them where they are.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Iterator, Mapping, Protocol, Sequence

from citadel.catalog.base import (CANDIDATE_PENDING, CANDIDATES_READ_LIMIT, DocumentRecord, ExpiredDocument,
                                  LatestVersion, ReadableDoc, StagedVersion, decide_next_version)
from citadel.catalog.base import ClaimedJob, QueuedJob, TierEntry
from citadel.errors import CatalogUnavailable, NotFound
from citadel.types import Governance, Principal, validate_tenant_id

# Statuses under which a document may be read at all; everything else is excluded at query time.
READABLE_STATUS = "published"
TENANT_WIDE = "tenant"
# SQLite's default limit on bound parameters is 999; IN lists stay well under it.
SQL_PARAMETER_BATCH = 500
# Rows `answer_log()` returns at most (it is for operators and tests, not bulk export).
ANSWER_LOG_READ_LIMIT = 1_000
# Most user ids `known_users()` returns (it seeds a masker held in memory by every process).
KNOWN_USERS_LIMIT = 100_000
SECONDS_PER_DAY = 86_400.0

log = logging.getLogger(__name__)


class Cursor(Protocol):
    """What both drivers' cursors give back after `execute` (rows are dicts)."""

    rowcount: int

    def fetchone(self) -> dict[str, Any] | None: ...
    def fetchall(self) -> list[dict[str, Any]]: ...


class Dialect(Protocol):
    """The fragments SQLite and Postgres spell differently (see the module docstring)."""

    driver_error: type[Exception]

    def sql(self, statement: str) -> str:
        """The statement, written with `?` placeholders, in this driver's placeholder style."""
    def in_list(self, column: str, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        """A condition "column is one of values", and its parameters."""
    def array_of(self, column: str, from_where: str) -> str:
        """A scalar subquery listing `column` of `from_where` (decoded by `array_values`)."""
    def array_values(self, value: Any) -> list[Any]: ...
    def json_array_cites(self, column: str, array: str) -> str:
        """A condition: the JSON text in `column` has an item in its `array` whose `document_id` is
        the one `?` parameter."""
    def lock_tenant(self, tx: Tx, tenant_id: str) -> None:
        """Serialise this transaction with the tenant's other read-then-write transactions."""


class Tx:
    """One connection or transaction as the shared statements see it: `?` statements, dict rows."""

    def __init__(self, raw: Any, dialect: Dialect):
        self._raw, self._dialect = raw, dialect

    def execute(self, statement: str, args: Sequence[Any] = ()) -> Cursor:
        # sqlite3's Connection.execute returns a new cursor, psycopg's Cursor.execute returns itself.
        return self._raw.execute(self._dialect.sql(statement), tuple(args))

    def executemany(self, statement: str, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            self._raw.executemany(self._dialect.sql(statement), rows)


@contextmanager
def unavailable_on_error(operation: str, driver_error: type[Exception]) -> Iterator[None]:
    """A database error inside the block becomes CatalogUnavailable; its text stays in the log."""
    try:
        yield
    except driver_error as error:
        log.warning("catalog %s failed: %s: %s", operation, type(error).__name__, error)
        raise CatalogUnavailable("the catalog is unavailable; try again shortly") from None


class SQLCatalog:
    """Every Catalog statement, once. A backend gives `dialect`, `_tx`, `_query` and `close`."""

    dialect: Dialect

    def _tx(self) -> AbstractContextManager[Tx]:
        """One atomic write transaction: all of it is visible, or none of it."""
        raise NotImplementedError

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """One read, its rows as dicts."""
        raise NotImplementedError

    def _scrub_deleted(self) -> None:
        """After deleting text that must not be recoverable: whatever the backend can do beyond DELETE."""

    def close(self) -> None:
        raise NotImplementedError

    # ----------------------------------------------------------------- tenants
    def ensure_tenant(self, tenant_id: str) -> None:
        # Every tenant-scoped write checks the id (jobs and audit rows may carry "*" and "-" instead).
        validate_tenant_id(tenant_id)
        with self._tx() as tx:
            tx.execute("INSERT INTO tenants (tenant_id, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                       (tenant_id, time.time()))

    def list_tenants(self) -> list[dict[str, Any]]:
        return self._query(
            """SELECT t.tenant_id, p.segment_id, p.tier, p.generation,
                      (SELECT COUNT(*) FROM documents d WHERE d.tenant_id = t.tenant_id
                          AND d.status = 'published') AS published_documents,
                      (SELECT COALESCE(SUM(v.chunk_count), 0) FROM documents d JOIN document_versions v
                          ON v.tenant_id = d.tenant_id AND v.document_id = d.document_id
                          AND v.version = d.published_version
                        WHERE d.tenant_id = t.tenant_id AND d.status = 'published') AS published_chunks
               FROM tenants t LEFT JOIN partitions p ON p.tenant_id = t.tenant_id
               ORDER BY t.tenant_id"""
        )

    # --------------------------------------------------------------- documents
    def _document_select(self) -> str:
        """A document row with its newest version and its groups, read in one statement (one snapshot)."""
        groups = self.dialect.array_of(
            "a.group_name", "FROM document_acl a WHERE a.tenant_id = d.tenant_id AND a.document_id = d.document_id")
        return f"""SELECT d.*,
                          (SELECT COALESCE(MAX(v.version), 0) FROM document_versions v
                            WHERE v.tenant_id = d.tenant_id AND v.document_id = d.document_id) AS latest_version,
                          {groups} AS groups, g.policy_id, g.policy_revision, g.sensitivity, g.retention_class
                   FROM documents d LEFT JOIN document_governance g ON g.tenant_id = d.tenant_id
                        AND g.document_id = d.document_id AND g.version = d.published_version"""

    def _record(self, row: dict[str, Any]) -> DocumentRecord:
        return DocumentRecord(
            tenant_id=row["tenant_id"],
            document_id=row["document_id"],
            title=row["title"],
            source=row["source"],
            owner=row["owner"],
            visibility=row["visibility"],
            effective_date=row["effective_date"],
            supersedes=row["supersedes"],
            status=row["status"],
            published_version=row["published_version"],
            latest_version=int(row["latest_version"]),
            acl_version=row["acl_version"],
            groups=tuple(sorted(self.dialect.array_values(row["groups"]))),
            governance=Governance.from_mapping(row),
        )

    def get_document(self, tenant_id: str, document_id: str) -> DocumentRecord | None:
        rows = self._query(self._document_select() + " WHERE d.tenant_id = ? AND d.document_id = ?",
                           (tenant_id, document_id))
        return self._record(rows[0]) if rows else None

    def list_documents(self, tenant_id: str) -> list[DocumentRecord]:
        rows = self._query(self._document_select() + " WHERE d.tenant_id = ? ORDER BY d.document_id", (tenant_id,))
        return [self._record(r) for r in rows]

    def next_version(
        self, tenant_id: str, document_id: str, content_hash: str, requested: int | None = None
    ) -> tuple[int, bool]:
        """The version a new upload gets, and whether it is the published content already."""
        rows = self._query(
            "SELECT version, content_hash, status FROM document_versions WHERE tenant_id = ? AND document_id = ?"
            " ORDER BY version DESC LIMIT 1",
            (tenant_id, document_id),
        )
        latest = LatestVersion(rows[0]["version"], rows[0]["content_hash"], rows[0]["status"]) if rows else None
        return decide_next_version(document_id, latest, content_hash, requested)

    def latest_versions(self, tenant_ids: list[str]) -> dict[tuple[str, str], LatestVersion]:
        """The newest version of every document of these tenants, keyed by (tenant, document)."""
        latest: dict[tuple[str, str], LatestVersion] = {}
        for start in range(0, len(tenant_ids), SQL_PARAMETER_BATCH):
            condition, args = self.dialect.in_list("tenant_id", tenant_ids[start : start + SQL_PARAMETER_BATCH])
            rows = self._query(
                f"""SELECT v.tenant_id, v.document_id, v.version, v.content_hash, v.status
                    FROM document_versions v JOIN (
                        SELECT tenant_id, document_id, MAX(version) AS version FROM document_versions
                        WHERE {condition} GROUP BY tenant_id, document_id
                    ) m ON m.tenant_id = v.tenant_id AND m.document_id = v.document_id AND m.version = v.version""",
                args,
            )
            for r in rows:
                latest[(r["tenant_id"], r["document_id"])] = LatestVersion(r["version"], r["content_hash"], r["status"])
        return latest

    def manifest(self, tenant_id: str, document_id: str, version: int) -> list[str]:
        rows = self._query(
            "SELECT chunk_id FROM chunk_manifests WHERE tenant_id = ? AND document_id = ? AND version = ?"
            " ORDER BY chunk_id",
            (tenant_id, document_id, version),
        )
        return [r["chunk_id"] for r in rows]

    def document_chunk_ids(self, tenant_id: str, document_id: str) -> set[str]:
        rows = self._query("SELECT chunk_id FROM chunk_manifests WHERE tenant_id = ? AND document_id = ?",
                           (tenant_id, document_id))
        return {r["chunk_id"] for r in rows}

    # -------------------------------------------------------------- publishing
    def published_segment(self, tenant_id: str) -> str | None:
        rows = self._query("SELECT segment_id FROM partitions WHERE tenant_id = ?", (tenant_id,))
        return rows[0]["segment_id"] if rows else None

    def publish(
        self, tenant_id: str, segment_id: str, tier: str, staged: list[StagedVersion], job_id: str
    ) -> None:
        """The atomic pointer switch: new versions, superseded ones, ACLs and the segment pointer."""
        validate_tenant_id(tenant_id)
        now = time.time()
        with self._tx() as tx:
            self.dialect.lock_tenant(tx, tenant_id)
            for item in staged:
                self._publish_version(tx, item, segment_id, job_id, now)
            tx.execute(
                """INSERT INTO partitions (tenant_id, segment_id, tier, generation, published_at)
                   VALUES (?, ?, ?, 1, ?)
                   ON CONFLICT (tenant_id) DO UPDATE SET segment_id = excluded.segment_id,
                       tier = excluded.tier, generation = partitions.generation + 1,
                       published_at = excluded.published_at""",
                (tenant_id, segment_id, tier, now),
            )
            # The tier and when it was entered: a publish in the same tier keeps the time (minimum stay).
            tx.execute(
                """INSERT INTO partition_tiers (tenant_id, tier, entered_at) VALUES (?, ?, ?)
                   ON CONFLICT (tenant_id) DO UPDATE SET entered_at = CASE
                       WHEN partition_tiers.tier = excluded.tier THEN partition_tiers.entered_at
                       ELSE excluded.entered_at END, tier = excluded.tier""",
                (tenant_id, tier, now),
            )
            _audit(tx, "ingest", "publish", tenant_id, segment_id,
                   {"job_id": job_id, "documents": [s.meta.document_id for s in staged]})

    def _publish_version(self, tx: Tx, item: StagedVersion, segment_id: str, job_id: str, now: float) -> None:
        meta = item.meta
        key = (meta.tenant_id, meta.document_id)
        tx.execute("UPDATE document_versions SET status = 'superseded' WHERE tenant_id = ? AND document_id = ?"
                   " AND status = 'published'", key)
        tx.execute(
            """INSERT INTO document_versions (tenant_id, document_id, version, status, content_hash,
                   chunk_count, segment_id, job_id, created_at)
               VALUES (?, ?, ?, 'published', ?, ?, ?, ?, ?)""",
            (*key, item.version, item.content_hash, len(item.chunk_ids), segment_id, job_id, now),
        )
        tx.executemany(
            "INSERT INTO chunk_manifests (tenant_id, document_id, version, chunk_id, content_hash)"
            " VALUES (?, ?, ?, ?, ?)",
            [(*key, item.version, cid, h) for cid, h in zip(item.chunk_ids, item.chunk_hashes)],
        )
        tx.execute(
            """INSERT INTO documents (tenant_id, document_id, title, source, owner, visibility,
                   effective_date, supersedes, status, published_version, acl_version, updated_at)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'published', ?, 0, ?)
               ON CONFLICT (tenant_id, document_id) DO UPDATE SET title = excluded.title,
                   source = excluded.source, owner = excluded.owner, visibility = excluded.visibility,
                   effective_date = excluded.effective_date, supersedes = excluded.supersedes,
                   status = 'published', published_version = excluded.published_version,
                   updated_at = excluded.updated_at""",
            (*key, meta.title or meta.document_id, meta.source, meta.owner, meta.visibility,
             meta.effective_date, meta.supersedes, item.version, now),
        )
        _record_governance(tx, meta.tenant_id, meta.document_id, item.version, meta.governance)
        # A new document starts at acl_version 0 and its first group set makes it 1.
        _replace_groups(tx, meta.tenant_id, meta.document_id, list(meta.groups), force=True)
        # Re-publishing a document that a published successor names in `supersedes` keeps it retired.
        tx.execute(
            """UPDATE documents SET status = 'superseded' WHERE tenant_id = ? AND document_id = ? AND EXISTS (
                   SELECT 1 FROM documents n WHERE n.tenant_id = documents.tenant_id
                     AND n.supersedes = documents.document_id AND n.status = 'published')""",
            key,
        )
        if meta.supersedes:
            # A document that names its predecessor retires it in the same transaction.
            tx.execute("UPDATE documents SET status = 'superseded', updated_at = ? WHERE tenant_id = ?"
                       " AND document_id = ? AND status = 'published'", (now, meta.tenant_id, meta.supersedes))

    # ------------------------------------------------------------ tier traffic
    def record_queries(self, day: int, counts: Mapping[str, int], keep_days: int) -> None:
        rows = [(tenant_id, int(day), int(n)) for tenant_id, n in sorted(counts.items()) if n > 0]
        with self._tx() as tx:
            tx.executemany(
                """INSERT INTO tenant_traffic (tenant_id, day, queries) VALUES (?, ?, ?)
                   ON CONFLICT (tenant_id, day) DO UPDATE SET queries = tenant_traffic.queries + excluded.queries""",
                rows)
            tx.execute("DELETE FROM tenant_traffic WHERE day < ?", (int(day) - int(keep_days) + 1,))

    def queries_since(self, tenant_ids: list[str], first_day: int) -> dict[str, int]:
        totals: dict[str, int] = {}
        for start in range(0, len(tenant_ids), SQL_PARAMETER_BATCH):
            condition, args = self.dialect.in_list("tenant_id", tenant_ids[start : start + SQL_PARAMETER_BATCH])
            rows = self._query(f"SELECT tenant_id, SUM(queries) AS queries FROM tenant_traffic WHERE {condition}"
                               " AND day >= ? GROUP BY tenant_id", (*args, int(first_day)))
            totals.update({r["tenant_id"]: int(r["queries"]) for r in rows})
        return totals

    def tier_entries(self, tenant_ids: list[str]) -> dict[str, TierEntry]:
        entries: dict[str, TierEntry] = {}
        for start in range(0, len(tenant_ids), SQL_PARAMETER_BATCH):
            condition, args = self.dialect.in_list("tenant_id", tenant_ids[start : start + SQL_PARAMETER_BATCH])
            rows = self._query(f"SELECT tenant_id, tier, entered_at FROM partition_tiers WHERE {condition}", args)
            entries.update({r["tenant_id"]: TierEntry(r["tier"], float(r["entered_at"])) for r in rows})
        return entries

    # -------------------------------------------------------------- governance
    def current_policy(self, tenant_id: str, policy_id: str) -> DocumentRecord | None:
        rows = self._query(
            self._document_select() + """ WHERE d.tenant_id = ? AND d.status = ? AND g.policy_id = ?
                ORDER BY (SELECT v.created_at FROM document_versions v WHERE v.tenant_id = d.tenant_id
                          AND v.document_id = d.document_id AND v.version = d.published_version) DESC,
                         d.document_id LIMIT 1""",
            (tenant_id, READABLE_STATUS, policy_id))
        return self._record(rows[0]) if rows else None

    def expired_documents(self, retention_days: dict[str, float], now: float, limit: int) -> list[ExpiredDocument]:
        if not retention_days:
            return []
        conditions, args = [], []
        for retention_class, days in sorted(retention_days.items()):
            cutoff = now - float(days) * SECONDS_PER_DAY
            # ISO dates compare as text; a version without one counts from when it was published
            conditions.append("(g.retention_class = ? AND ((d.effective_date IS NOT NULL AND d.effective_date < ?)"
                              " OR (d.effective_date IS NULL AND v.created_at < ?)))")
            args += [retention_class, time.strftime("%Y-%m-%d", time.gmtime(cutoff)), cutoff]
        rows = self._query(
            f"""SELECT d.tenant_id, d.document_id, g.retention_class FROM documents d
                JOIN document_governance g ON g.tenant_id = d.tenant_id AND g.document_id = d.document_id
                     AND g.version = d.published_version
                JOIN document_versions v ON v.tenant_id = d.tenant_id AND v.document_id = d.document_id
                     AND v.version = d.published_version
                WHERE d.status <> 'withdrawn' AND ({" OR ".join(conditions)})
                ORDER BY d.tenant_id, d.document_id LIMIT ?""",
            (*args, int(limit)))
        return [ExpiredDocument(r["tenant_id"], r["document_id"], r["retention_class"]) for r in rows]

    # ------------------------------------------------------------- permissions
    def readable_documents(self, principal: Principal) -> dict[str, ReadableDoc]:
        """Every document version this principal may read now: published, current, ACL-permitted."""
        in_groups, group_args = self.dialect.in_list("a.group_name", sorted(principal.groups))
        rows = self._query(
            f"""SELECT d.document_id, d.published_version, d.title, d.source FROM documents d
                WHERE d.tenant_id = ? AND d.status = ? AND d.published_version IS NOT NULL
                  AND (d.visibility = ? OR EXISTS (
                       SELECT 1 FROM document_acl a WHERE a.tenant_id = d.tenant_id
                         AND a.document_id = d.document_id AND {in_groups}))""",
            (principal.tenant_id, READABLE_STATUS, TENANT_WIDE, *group_args),
        )
        return {r["document_id"]: ReadableDoc(r["document_id"], r["published_version"], r["title"], r["source"])
                for r in rows}

    def set_acl(self, tenant_id: str, document_id: str, groups: list[str], actor: str) -> int:
        validate_tenant_id(tenant_id)
        key = (tenant_id, document_id)
        with self._tx() as tx:
            self.dialect.lock_tenant(tx, tenant_id)
            if tx.execute("SELECT acl_version FROM documents WHERE tenant_id = ? AND document_id = ?",
                          key).fetchone() is None:
                raise NotFound(f"no document {document_id!r} in tenant {tenant_id!r}")
            visibility = TENANT_WIDE if "*" in groups else "groups"
            tx.execute("UPDATE documents SET visibility = ?, updated_at = ? WHERE tenant_id = ? AND document_id = ?",
                       (visibility, time.time(), *key))
            _replace_groups(tx, tenant_id, document_id, [g for g in groups if g != "*"])
            row = tx.execute("SELECT acl_version FROM documents WHERE tenant_id = ? AND document_id = ?",
                             key).fetchone()
            version = int(row["acl_version"])
            _audit(tx, actor, "acl_set", tenant_id, document_id, {"groups": groups, "acl_version": version})
            return version

    def withdraw(self, tenant_id: str, document_id: str, actor: str) -> None:
        validate_tenant_id(tenant_id)
        with self._tx() as tx:
            self.dialect.lock_tenant(tx, tenant_id)
            cursor = tx.execute("UPDATE documents SET status = 'withdrawn', updated_at = ? WHERE tenant_id = ?"
                                " AND document_id = ?", (time.time(), tenant_id, document_id))
            if cursor.rowcount == 0:
                raise NotFound(f"no document {document_id!r} in tenant {tenant_id!r}")
            tx.execute("UPDATE document_versions SET status = 'withdrawn' WHERE tenant_id = ? AND document_id = ?"
                       " AND status = 'published'", (tenant_id, document_id))
            _audit(tx, actor, "withdraw", tenant_id, document_id, {})

    # ------------------------------------------------------ jobs, dead letters
    def create_job(self, tenant_id: str, kind: str) -> str:
        job_id = uuid.uuid4().hex[:16]
        with self._tx() as tx:
            tx.execute("INSERT INTO jobs (job_id, tenant_id, kind, status, created_at) VALUES (?, ?, ?, 'running', ?)",
                       (job_id, tenant_id, kind, time.time()))
        return job_id

    def finish_job(self, job_id: str, status: str, report: dict[str, Any]) -> None:
        """A queued job is finished through its lease only (`finish_leased_job`)."""
        with self._tx() as tx:
            tx.execute("UPDATE jobs SET status = ?, finished_at = ?, report = ? WHERE job_id = ? AND NOT EXISTS"
                       " (SELECT 1 FROM job_queue q WHERE q.job_id = jobs.job_id)",
                       (status, time.time(), json.dumps(report), job_id))

    _JOB_SELECT = ("SELECT j.*, q.document_id, q.version, q.state, q.owner, q.lease_expires_at, q.attempts,"
                   " q.progress FROM jobs j LEFT JOIN job_queue q ON q.job_id = j.job_id")

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        rows = self._query(self._JOB_SELECT + " WHERE j.job_id = ?", (job_id,))
        return _job_row(rows[0]) if rows else None

    def list_jobs(self, tenant_ids: list[str] | None = None, limit: int = 100) -> list[dict[str, Any]]:
        where, args = "", ()
        if tenant_ids is not None:
            condition, args = self.dialect.in_list("j.tenant_id", tenant_ids[:SQL_PARAMETER_BATCH])
            where = f" WHERE {condition}"
        rows = self._query(f"{self._JOB_SELECT}{where} ORDER BY j.created_at DESC, j.job_id LIMIT ?",
                           (*args, int(limit)))
        return [_job_row(r) for r in rows]

    def job_counts(self) -> dict[str, int]:
        rows = self._query("SELECT status, COUNT(*) AS jobs FROM jobs GROUP BY status", ())
        return {r["status"]: int(r["jobs"]) for r in rows}

    # ------------------------------------------------------ the job queue and its leases
    def queue_ingest_job(self, tenant_id: str, document_id: str, spec: dict[str, Any], owner: str,
                         lease_s: float, now: float) -> QueuedJob:
        validate_tenant_id(tenant_id)
        job_id = uuid.uuid4().hex[:16]
        key = (tenant_id, document_id)
        with self._tx() as tx:
            self.dialect.lock_tenant(tx, tenant_id)  # two uploads of one document reserve two versions
            recorded = tx.execute("SELECT COALESCE(MAX(version), 0) AS v FROM document_versions WHERE tenant_id = ?"
                                  " AND document_id = ?", key).fetchone()
            reserved = tx.execute("SELECT COALESCE(MAX(version), 0) AS v FROM job_queue WHERE tenant_id = ?"
                                  " AND document_id = ?", key).fetchone()
            version = max(int(recorded["v"]) if recorded else 0, int(reserved["v"]) if reserved else 0) + 1
            tx.execute("INSERT INTO jobs (job_id, tenant_id, kind, status, created_at) VALUES (?, ?, 'ingest', 'queued', ?)",
                       (job_id, tenant_id, now))
            tx.execute("INSERT INTO job_queue (job_id, tenant_id, document_id, version, spec, state, owner,"
                       " lease_expires_at, attempts, queued_at) VALUES (?, ?, ?, ?, ?, 'leased', ?, ?, 0, ?)",
                       (job_id, *key, version, json.dumps(spec), owner, now + lease_s, now))
        return QueuedJob(job_id, version)

    def claim_job(self, owner: str, lease_s: float, now: float) -> ClaimedJob | None:
        claimable = "(state = 'queued' OR (state = 'leased' AND lease_expires_at < ?))"
        # Read first, outside a write transaction: an idle runner's poll takes no write lock.
        candidates = self._query(f"SELECT job_id FROM job_queue WHERE {claimable} ORDER BY queued_at, job_id"
                                 " LIMIT 8", (now,))
        if not candidates:
            return None
        with self._tx() as tx:
            for candidate in candidates:
                # Re-checked by the UPDATE itself: of two runners racing for a job one updates it, the
                # other finds it no longer claimable (Postgres re-reads the row after the first commits).
                row = tx.execute(f"UPDATE job_queue SET state = 'leased', owner = ?, lease_expires_at = ?,"
                                 f" attempts = attempts + 1 WHERE job_id = ? AND {claimable} RETURNING *",
                                 (owner, now + lease_s, candidate["job_id"], now)).fetchone()
                if row is not None:
                    tx.execute("UPDATE jobs SET status = 'running' WHERE job_id = ?", (row["job_id"],))
                    return ClaimedJob(row["job_id"], row["tenant_id"], row["document_id"], int(row["version"]),
                                      json.loads(row["spec"]), int(row["attempts"]))
        return None

    def renew_job_lease(self, job_id: str, owner: str, lease_s: float, now: float,
                        progress: dict[str, Any] | None = None) -> bool:
        with self._tx() as tx:
            return tx.execute("UPDATE job_queue SET lease_expires_at = ?, progress = COALESCE(?, progress)"
                              " WHERE job_id = ? AND owner = ? AND state = 'leased'",
                              (now + lease_s, None if progress is None else json.dumps(progress), job_id,
                               owner)).rowcount == 1

    def release_job(self, job_id: str, owner: str, progress: dict[str, Any] | None = None) -> bool:
        with self._tx() as tx:
            released = tx.execute("UPDATE job_queue SET state = 'queued', owner = NULL, lease_expires_at = NULL,"
                                  " progress = COALESCE(?, progress) WHERE job_id = ? AND owner = ?"
                                  " AND state = 'leased'",
                                  (None if progress is None else json.dumps(progress), job_id, owner)).rowcount == 1
            if released:
                tx.execute("UPDATE jobs SET status = 'queued' WHERE job_id = ?", (job_id,))
            return released

    def finish_leased_job(self, job_id: str, owner: str, status: str, report: dict[str, Any]) -> bool:
        with self._tx() as tx:
            finished = tx.execute("UPDATE job_queue SET state = 'done', lease_expires_at = NULL WHERE job_id = ?"
                                  " AND owner = ? AND state = 'leased'", (job_id, owner)).rowcount == 1
            if finished:
                tx.execute("UPDATE jobs SET status = ?, finished_at = ?, report = ? WHERE job_id = ?",
                           (status, time.time(), json.dumps(report), job_id))
            return finished

    def add_dead_letter(self, job_id: str, tenant_id: str, source: str, code: str, reason: str,
                        meta: dict[str, Any]) -> int:
        validate_tenant_id(tenant_id)
        with self._tx() as tx:
            return _inserted_id(tx.execute(
                "INSERT INTO dead_letters (job_id, tenant_id, source, code, reason, meta, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (job_id, tenant_id, source, code, reason, json.dumps(meta), time.time())))

    def dead_letters(self, tenant_id: str | None = None, include_retried: bool = False) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM dead_letters WHERE 1 = 1", ()
        if tenant_id is not None:
            sql, args = sql + " AND tenant_id = ?", (tenant_id,)
        if not include_retried:
            sql += " AND retried_at IS NULL"
        return [{**r, "meta": json.loads(r["meta"])} for r in self._query(sql + " ORDER BY id", args)]

    def mark_dead_letter_retried(self, dead_letter_id: int) -> None:
        with self._tx() as tx:
            tx.execute("UPDATE dead_letters SET retried_at = ? WHERE id = ?", (time.time(), dead_letter_id))

    # ------------------------------------------------------------------ audit
    def audit(self, actor: str, action: str, tenant_id: str, target: str, detail: dict[str, Any]) -> None:
        with self._tx() as tx:
            _audit(tx, actor, action, tenant_id, target, detail)

    def audit_log(self, tenant_id: str | None = None) -> list[dict[str, Any]]:
        if tenant_id is None:
            rows = self._query("SELECT * FROM audit_log ORDER BY id")
        else:
            rows = self._query("SELECT * FROM audit_log WHERE tenant_id = ? ORDER BY id", (tenant_id,))
        return [{**r, "detail": json.loads(r["detail"])} for r in rows]

    # ------------------------------------------------------------- answer log
    def log_answer(self, request_id: str, tenant_id: str, user_id: str, question: str,
                   response: dict[str, Any], correlation_id: str | None = None, cached: bool = False) -> int:
        """Append one row (a plain INSERT under a fresh row id: a repeated request id, the server's
        or the client's correlation id, adds a row and never replaces one). Returns the row id."""
        with self._tx() as tx:
            return _inserted_id(tx.execute(
                "INSERT INTO answer_log (request_id, correlation_id, ts, tenant_id, user_id, question, response,"
                " cached) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (request_id, correlation_id, time.time(), tenant_id, user_id, question, json.dumps(response),
                 bool(cached))))

    def answer_entry(self, request_id: str, tenant_id: str, user_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM answer_log WHERE request_id = ? AND tenant_id = ? AND user_id = ?"
                           " ORDER BY id DESC LIMIT 1", (request_id, tenant_id, user_id))
        return _answer_row(rows[0]) if rows else None

    def answer_log(self, tenant_id: str | None = None, limit: int = ANSWER_LOG_READ_LIMIT,
                   since: float | None = None) -> list[dict[str, Any]]:
        """The newest `limit` rows (of one tenant; logged at or after `since`), oldest first."""
        where, args = "WHERE ts >= ?", (float(since or 0.0),)
        if tenant_id is not None:
            where, args = f"{where} AND tenant_id = ?", (*args, tenant_id)
        rows = self._query(f"SELECT * FROM (SELECT * FROM answer_log {where} ORDER BY id DESC LIMIT ?) AS newest"
                           " ORDER BY id", (*args, int(limit)))
        return [_answer_row(r) for r in rows]

    def purge_answers(self, older_than_s: float) -> int:
        with self._tx() as tx:
            return tx.execute("DELETE FROM answer_log WHERE ts < ?", (time.time() - older_than_s,)).rowcount

    def forget_answers_citing(self, tenant_id: str, document_id: str) -> int:
        """The rows whose answer cites the document go, and the kept prompts of every request whose
        prompt held it as a source (encrypted, but its text all the same)."""
        cites = self.dialect.json_array_cites("response", "citations")
        prompted = self.dialect.json_array_cites("response", "sources")
        item_cites = self.dialect.json_array_cites("item", "sources")
        with self._tx() as tx:
            tx.execute(f"DELETE FROM prompt_vault WHERE tenant_id = ? AND request_id IN (SELECT request_id"
                       f" FROM answer_log WHERE tenant_id = ? AND ({cites} OR {prompted}))",
                       (tenant_id, tenant_id, document_id, document_id))
            forgotten = tx.execute(f"DELETE FROM answer_log WHERE tenant_id = ? AND {cites}",
                                   (tenant_id, document_id)).rowcount
            tx.execute(f"DELETE FROM eval_candidates WHERE tenant_id = ? AND {item_cites}", (tenant_id, document_id))
        self._scrub_deleted()
        return forgotten

    def record_feedback(self, answer_id: str, tenant_id: str, user_id: str, vote: str, reason: str | None,
                        comment: str, sources: list[dict[str, Any]]) -> int:
        with self._tx() as tx:
            return _inserted_id(tx.execute(
                "INSERT INTO answer_feedback (answer_id, ts, tenant_id, user_id, vote, reason, comment, sources)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (answer_id, time.time(), tenant_id, user_id, vote, reason, comment, json.dumps(sources))))

    def feedback(self, tenant_id: str) -> list[dict[str, Any]]:
        rows = self._query("SELECT * FROM answer_feedback WHERE tenant_id = ? ORDER BY id", (tenant_id,))
        return [{**r, "sources": json.loads(r["sources"])} for r in rows]

    def known_users(self, limit: int = KNOWN_USERS_LIMIT) -> list[str]:
        """User ids the catalog has seen ask or vote (for masking their names in logs and spans)."""
        rows = self._query("SELECT user_id FROM answer_log UNION SELECT user_id FROM answer_feedback LIMIT ?",
                           (int(limit),))
        return [r["user_id"] for r in rows]

    # ----------------------------------------------- the prompt vault's rows (ciphertext only)
    def keep_prompt(self, request_id: str, tenant_id: str, user_id: str, kid: str, nonce: bytes,
                    ciphertext: bytes) -> None:
        with self._tx() as tx:
            tx.execute("INSERT INTO prompt_vault (request_id, ts, tenant_id, user_id, kid, nonce, ciphertext)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (request_id, time.time(), tenant_id, user_id, kid, bytes(nonce), bytes(ciphertext)))

    def kept_prompt(self, request_id: str) -> dict[str, Any] | None:
        """The newest vault row of this request id (ts, tenant_id, user_id, kid, nonce, ciphertext)."""
        rows = self._query("SELECT * FROM prompt_vault WHERE request_id = ? ORDER BY id DESC LIMIT 1", (request_id,))
        return {**rows[0], "nonce": bytes(rows[0]["nonce"]), "ciphertext": bytes(rows[0]["ciphertext"])} \
            if rows else None

    def purge_prompts(self, older_than_s: float) -> int:
        with self._tx() as tx:
            return tx.execute("DELETE FROM prompt_vault WHERE ts < ?", (time.time() - older_than_s,)).rowcount

    # ------------------------------------------------------------- candidate test items
    def queue_candidate(self, tenant_id: str, source: str, origin: str, item: dict[str, Any],
                        max_pending: int) -> int | None:
        validate_tenant_id(tenant_id)
        with self._tx() as tx:
            self.dialect.lock_tenant(tx, tenant_id)  # the count and the insert see every other writer's rows
            known = tx.execute("SELECT id FROM eval_candidates WHERE tenant_id = ? AND source = ? AND origin = ?",
                               (tenant_id, source, origin)).fetchone()
            if known is not None:
                return int(known["id"])
            pending = tx.execute("SELECT COUNT(*) AS n FROM eval_candidates WHERE tenant_id = ? AND status = ?"
                                 " AND source = ?", (tenant_id, CANDIDATE_PENDING, source)).fetchone()
            if pending is not None and pending["n"] >= max_pending:
                return None
            return _inserted_id(tx.execute(
                "INSERT INTO eval_candidates (tenant_id, source, origin, status, item, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                (tenant_id, source, origin, CANDIDATE_PENDING, json.dumps(item), time.time())))

    def candidates(self, tenant_id: str, source: str | None = None, status: str | None = None,
                   limit: int = CANDIDATES_READ_LIMIT, after_id: int = 0) -> list[dict[str, Any]]:
        rows = self._query("SELECT * FROM eval_candidates WHERE tenant_id = ? AND (CAST(? AS TEXT) IS NULL"
                           " OR source = ?) AND (CAST(? AS TEXT) IS NULL OR status = ?) AND id > ? ORDER BY id LIMIT ?",
                           (tenant_id, source, source, status, status, int(after_id), int(limit)))
        return [_candidate_row(r) for r in rows]

    def candidate(self, candidate_id: int) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM eval_candidates WHERE id = ?", (int(candidate_id),))
        return _candidate_row(rows[0]) if rows else None

    def decide_candidate(self, candidate_id: int, status: str, label: dict[str, Any] | None,
                         actor: str) -> dict[str, Any] | None:
        with self._tx() as tx:
            row = tx.execute(
                "UPDATE eval_candidates SET status = ?, label = ?, decided_at = ?, decided_by = ?"
                " WHERE id = ? AND status = ? RETURNING *",
                (status, None if label is None else json.dumps(label), time.time(), actor, int(candidate_id),
                 CANDIDATE_PENDING)).fetchone()
            if row is None:
                return None
            decided = _candidate_row(row)
            _audit(tx, actor, f"candidate_{status}", decided["tenant_id"], str(decided["id"]),
                   {"source": decided["source"], "origin": decided["origin"]})
            return decided


def _replace_groups(tx: Tx, tenant_id: str, document_id: str, groups: list[str], force: bool = False) -> bool:
    key = (tenant_id, document_id)
    current = {r["group_name"] for r in tx.execute(
        "SELECT group_name FROM document_acl WHERE tenant_id = ? AND document_id = ?", key).fetchall()}
    wanted = set(groups)
    if current == wanted and not force:
        return False
    tx.execute("DELETE FROM document_acl WHERE tenant_id = ? AND document_id = ?", key)
    tx.executemany("INSERT INTO document_acl (tenant_id, document_id, group_name) VALUES (?, ?, ?)",
                   [(*key, g) for g in sorted(wanted)])
    tx.execute("UPDATE documents SET acl_version = acl_version + 1 WHERE tenant_id = ? AND document_id = ?", key)
    return True


def _record_governance(tx: Tx, tenant_id: str, document_id: str, version: int, governance: Governance) -> None:
    """The version's governance row, when it states any (a version without one has no row)."""
    if not any(governance.to_dict().values()):
        return
    tx.execute(
        """INSERT INTO document_governance (tenant_id, document_id, version, policy_id, policy_revision,
               sensitivity, retention_class) VALUES (?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (tenant_id, document_id, version) DO UPDATE SET policy_id = excluded.policy_id,
               policy_revision = excluded.policy_revision, sensitivity = excluded.sensitivity,
               retention_class = excluded.retention_class""",
        (tenant_id, document_id, version, governance.policy_id, governance.policy_revision, governance.sensitivity,
         governance.retention_class))


def _audit(tx: Tx, actor: str, action: str, tenant_id: str, target: str, detail: dict[str, Any]) -> None:
    tx.execute("INSERT INTO audit_log (ts, actor, action, tenant_id, target, detail) VALUES (?, ?, ?, ?, ?, ?)",
               (time.time(), actor, action, tenant_id, target, json.dumps(detail)))


def _inserted_id(cursor: Cursor) -> int:
    row = cursor.fetchone()
    assert row is not None, "an INSERT ... RETURNING id returns its row"
    return int(row["id"])


def _job_row(row: dict[str, Any]) -> dict[str, Any]:
    job = dict(row)
    job["report"] = json.loads(job["report"]) if job["report"] else None
    job["progress"] = json.loads(job["progress"]) if job.get("progress") else None
    return job


def _candidate_row(row: dict[str, Any]) -> dict[str, Any]:
    label = row["label"]
    return {**row, "id": int(row["id"]), "item": json.loads(row["item"]),
            "label": json.loads(label) if label is not None else None}


def _answer_row(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "cached": bool(row["cached"]), "response": json.loads(row["response"])}
