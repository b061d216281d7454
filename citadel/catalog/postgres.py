"""Postgres implementation of the Catalog: the one several nodes share (DESIGN.md §7).

The same protocol and semantics as the SQLite reference (citadel/catalog/sqlite.py), held by the
same conformance suite (tests/conformance/test_catalog_backends.py):
- Connections come from a `psycopg_pool.ConnectionPool` (`min_size`..`max_size`, each checked before
  it is handed out, so a restarted server costs no failed request); the pool is thread-safe, like
  the SQLite backend's lock.
- Each write is one transaction: all of it is visible, or none of it. Writes that read before they
  write (publish, ACL changes, withdrawals) first take a transaction-scoped advisory lock on their
  tenant, so they are serialised per tenant as SQLite serialises every writer (BEGIN IMMEDIATE).
- The schema comes from the numbered migrations in citadel/catalog/migrations/, applied on open
  under an advisory lock (once, however many processes start at once).
- Every driver or pool error leaves as `CatalogUnavailable`, its text in the server log only; the
  protocol's other errors (`NotFound`, `InvalidTenant`, `stale_version`) are raised as SQLite does.
Queries are parameterised; the only SQL text ever built is fixed.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from contextlib import contextmanager
from typing import Any, Iterator

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from citadel.catalog.base import (CANDIDATE_PENDING, CANDIDATES_READ_LIMIT, DocumentRecord, LatestVersion, ReadableDoc,
                                  StagedVersion, decide_next_version)
from citadel.catalog.migrations import apply_migrations
from citadel.errors import CatalogUnavailable, NotFound
from citadel.types import Principal, validate_tenant_id

READABLE_STATUS = "published"
TENANT_WIDE = "tenant"
ANSWER_LOG_READ_LIMIT = 1_000
KNOWN_USERS_LIMIT = 100_000
# The first key of the two-key advisory locks that serialise one tenant's document writes
# (the second is the tenant id's hash); distinct from the migration lock's single key.
_TENANT_WRITE_LOCK = 0x63_74_64_6C  # "ctdl"

# A document row with its newest version and its groups, read in one statement (one snapshot).
_DOCUMENT_SELECT = """
    SELECT d.*,
           (SELECT COALESCE(MAX(v.version), 0) FROM document_versions v
             WHERE v.tenant_id = d.tenant_id AND v.document_id = d.document_id) AS latest_version,
           ARRAY(SELECT a.group_name FROM document_acl a
                  WHERE a.tenant_id = d.tenant_id AND a.document_id = d.document_id
                  ORDER BY a.group_name) AS groups
    FROM documents d"""

log = logging.getLogger(__name__)


class PostgresCatalog:
    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 10, timeout_s: float = 5.0,
                 connect_timeout_s: int = 5, application_name: str = "citadel-catalog"):
        """`dsn`: a libpq URL or conninfo (postgresql://user@host:port/db). `min_size`/`max_size`: the
        pool's bounds; `timeout_s`: how long a call waits for a pooled connection before it fails as
        CatalogUnavailable. Applies the pending migrations before it returns."""
        if min_size < 0 or max_size < max(min_size, 1):
            raise ValueError(f"pool sizes must satisfy 0 <= min_size <= max_size, max_size >= 1 "
                             f"(got {min_size}, {max_size})")
        connect_kwargs = {"connect_timeout": connect_timeout_s, "application_name": application_name}
        with _unavailable_on_error("migrate"):
            with psycopg.connect(dsn, **connect_kwargs) as conn:
                applied = apply_migrations(conn)
        if applied:
            log.info("catalog migrations applied: %s", applied)
        self._pool = ConnectionPool(dsn, min_size=min_size, max_size=max_size, timeout=timeout_s,
                                    kwargs=connect_kwargs, check=ConnectionPool.check_connection,
                                    name="citadel-catalog", open=True)

    def close(self) -> None:
        self._pool.close()

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Cursor]:
        """One atomic write transaction: committed when the block ends, rolled back if it raises."""
        with _unavailable_on_error("write"), self._pool.connection() as conn:
            with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
                yield cur

    def _query(self, sql: str, args: tuple = ()) -> list[dict[str, Any]]:
        with _unavailable_on_error("read"), self._pool.connection() as conn:
            with conn.cursor(row_factory=dict_row) as cur:
                cur.execute(sql, args)
                return cur.fetchall()

    @staticmethod
    def _lock_tenant(cur: psycopg.Cursor, tenant_id: str) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_TENANT_WRITE_LOCK, tenant_id))

    # ----------------------------------------------------------------- tenants
    def ensure_tenant(self, tenant_id: str) -> None:
        validate_tenant_id(tenant_id)
        with self._tx() as cur:
            cur.execute("INSERT INTO tenants (tenant_id, created_at) VALUES (%s, %s) ON CONFLICT DO NOTHING",
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
    def get_document(self, tenant_id: str, document_id: str) -> DocumentRecord | None:
        rows = self._query(_DOCUMENT_SELECT + " WHERE d.tenant_id = %s AND d.document_id = %s",
                           (tenant_id, document_id))
        return _record(rows[0]) if rows else None

    def list_documents(self, tenant_id: str) -> list[DocumentRecord]:
        rows = self._query(_DOCUMENT_SELECT + " WHERE d.tenant_id = %s ORDER BY d.document_id", (tenant_id,))
        return [_record(r) for r in rows]

    def next_version(
        self, tenant_id: str, document_id: str, content_hash: str, requested: int | None = None
    ) -> tuple[int, bool]:
        rows = self._query(
            "SELECT version, content_hash, status FROM document_versions WHERE tenant_id = %s AND document_id = %s"
            " ORDER BY version DESC LIMIT 1",
            (tenant_id, document_id),
        )
        latest = LatestVersion(rows[0]["version"], rows[0]["content_hash"], rows[0]["status"]) if rows else None
        return decide_next_version(document_id, latest, content_hash, requested)

    def latest_versions(self, tenant_ids: list[str]) -> dict[tuple[str, str], LatestVersion]:
        if not tenant_ids:
            return {}
        rows = self._query(
            """SELECT DISTINCT ON (tenant_id, document_id) tenant_id, document_id, version, content_hash, status
               FROM document_versions WHERE tenant_id = ANY(%s)
               ORDER BY tenant_id, document_id, version DESC""",
            (list(tenant_ids),),
        )
        return {(r["tenant_id"], r["document_id"]): LatestVersion(r["version"], r["content_hash"], r["status"])
                for r in rows}

    def manifest(self, tenant_id: str, document_id: str, version: int) -> list[str]:
        rows = self._query(
            "SELECT chunk_id FROM chunk_manifests WHERE tenant_id = %s AND document_id = %s AND version = %s"
            " ORDER BY chunk_id",
            (tenant_id, document_id, version),
        )
        return [r["chunk_id"] for r in rows]

    def document_chunk_ids(self, tenant_id: str, document_id: str) -> set[str]:
        rows = self._query("SELECT chunk_id FROM chunk_manifests WHERE tenant_id = %s AND document_id = %s",
                           (tenant_id, document_id))
        return {r["chunk_id"] for r in rows}

    # -------------------------------------------------------------- publishing
    def published_segment(self, tenant_id: str) -> str | None:
        rows = self._query("SELECT segment_id FROM partitions WHERE tenant_id = %s", (tenant_id,))
        return rows[0]["segment_id"] if rows else None

    def publish(
        self, tenant_id: str, segment_id: str, tier: str, staged: list[StagedVersion], job_id: str
    ) -> None:
        """The atomic pointer switch: new versions, superseded ones, ACLs and the segment pointer."""
        validate_tenant_id(tenant_id)
        now = time.time()
        with self._tx() as cur:
            self._lock_tenant(cur, tenant_id)
            for item in staged:
                self._publish_version(cur, item, segment_id, job_id, now)
            cur.execute(
                """INSERT INTO partitions (tenant_id, segment_id, tier, generation, published_at)
                   VALUES (%s, %s, %s, 1, %s)
                   ON CONFLICT (tenant_id) DO UPDATE SET segment_id = excluded.segment_id,
                       tier = excluded.tier, generation = partitions.generation + 1,
                       published_at = excluded.published_at""",
                (tenant_id, segment_id, tier, now),
            )
            _audit(cur, "ingest", "publish", tenant_id, segment_id,
                   {"job_id": job_id, "documents": [s.meta.document_id for s in staged]})

    def _publish_version(self, cur: psycopg.Cursor, item: StagedVersion, segment_id: str, job_id: str,
                         now: float) -> None:
        meta = item.meta
        key = (meta.tenant_id, meta.document_id)
        cur.execute(
            "UPDATE document_versions SET status = 'superseded' WHERE tenant_id = %s AND document_id = %s"
            " AND status = 'published'",
            key,
        )
        cur.execute(
            """INSERT INTO document_versions (tenant_id, document_id, version, status, content_hash,
                   chunk_count, segment_id, job_id, created_at)
               VALUES (%s, %s, %s, 'published', %s, %s, %s, %s, %s)""",
            (*key, item.version, item.content_hash, len(item.chunk_ids), segment_id, job_id, now),
        )
        if item.chunk_ids:
            cur.executemany(
                "INSERT INTO chunk_manifests (tenant_id, document_id, version, chunk_id, content_hash)"
                " VALUES (%s, %s, %s, %s, %s)",
                [(*key, item.version, cid, h) for cid, h in zip(item.chunk_ids, item.chunk_hashes)],
            )
        cur.execute(
            """INSERT INTO documents (tenant_id, document_id, title, source, owner, visibility,
                   effective_date, supersedes, status, published_version, acl_version, updated_at)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'published', %s, 0, %s)
               ON CONFLICT (tenant_id, document_id) DO UPDATE SET title = excluded.title,
                   source = excluded.source, owner = excluded.owner, visibility = excluded.visibility,
                   effective_date = excluded.effective_date, supersedes = excluded.supersedes,
                   status = 'published', published_version = excluded.published_version,
                   updated_at = excluded.updated_at""",
            (*key, meta.title or meta.document_id, meta.source, meta.owner, meta.visibility,
             meta.effective_date, meta.supersedes, item.version, now),
        )
        # A new document starts at acl_version 0 and its first group set makes it 1.
        _replace_groups(cur, meta.tenant_id, meta.document_id, list(meta.groups), force=True)
        # Re-publishing a document that a published successor names in `supersedes` keeps it retired.
        cur.execute(
            """UPDATE documents SET status = 'superseded' WHERE tenant_id = %s AND document_id = %s AND EXISTS (
                   SELECT 1 FROM documents n WHERE n.tenant_id = documents.tenant_id
                     AND n.supersedes = documents.document_id AND n.status = 'published')""",
            key,
        )
        if meta.supersedes:
            # A document that names its predecessor retires it in the same transaction.
            cur.execute(
                "UPDATE documents SET status = 'superseded', updated_at = %s WHERE tenant_id = %s"
                " AND document_id = %s AND status = 'published'",
                (now, meta.tenant_id, meta.supersedes),
            )

    # ------------------------------------------------------------- permissions
    def readable_documents(self, principal: Principal) -> dict[str, ReadableDoc]:
        """Every document version this principal may read now: published, current, ACL-permitted."""
        rows = self._query(
            """SELECT d.document_id, d.published_version, d.title, d.source FROM documents d
               WHERE d.tenant_id = %s AND d.status = %s AND d.published_version IS NOT NULL
                 AND (d.visibility = %s OR EXISTS (
                      SELECT 1 FROM document_acl a WHERE a.tenant_id = d.tenant_id
                        AND a.document_id = d.document_id AND a.group_name = ANY(%s)))""",
            (principal.tenant_id, READABLE_STATUS, TENANT_WIDE, sorted(principal.groups)),
        )
        return {r["document_id"]: ReadableDoc(r["document_id"], r["published_version"], r["title"], r["source"])
                for r in rows}

    def set_acl(self, tenant_id: str, document_id: str, groups: list[str], actor: str) -> int:
        validate_tenant_id(tenant_id)
        with self._tx() as cur:
            self._lock_tenant(cur, tenant_id)
            cur.execute("SELECT acl_version FROM documents WHERE tenant_id = %s AND document_id = %s",
                        (tenant_id, document_id))
            if cur.fetchone() is None:
                raise NotFound(f"no document {document_id!r} in tenant {tenant_id!r}")
            visibility = TENANT_WIDE if "*" in groups else "groups"
            cur.execute("UPDATE documents SET visibility = %s, updated_at = %s WHERE tenant_id = %s"
                        " AND document_id = %s", (visibility, time.time(), tenant_id, document_id))
            _replace_groups(cur, tenant_id, document_id, [g for g in groups if g != "*"])
            cur.execute("SELECT acl_version FROM documents WHERE tenant_id = %s AND document_id = %s",
                        (tenant_id, document_id))
            version = int(cur.fetchone()["acl_version"])
            _audit(cur, actor, "acl_set", tenant_id, document_id, {"groups": groups, "acl_version": version})
            return version

    def withdraw(self, tenant_id: str, document_id: str, actor: str) -> None:
        validate_tenant_id(tenant_id)
        with self._tx() as cur:
            self._lock_tenant(cur, tenant_id)
            cur.execute("UPDATE documents SET status = 'withdrawn', updated_at = %s WHERE tenant_id = %s"
                        " AND document_id = %s", (time.time(), tenant_id, document_id))
            if cur.rowcount == 0:
                raise NotFound(f"no document {document_id!r} in tenant {tenant_id!r}")
            cur.execute("UPDATE document_versions SET status = 'withdrawn' WHERE tenant_id = %s"
                        " AND document_id = %s AND status = 'published'", (tenant_id, document_id))
            _audit(cur, actor, "withdraw", tenant_id, document_id, {})

    # ------------------------------------------------------ jobs, dead letters
    def create_job(self, tenant_id: str, kind: str) -> str:
        job_id = uuid.uuid4().hex[:16]
        with self._tx() as cur:
            cur.execute("INSERT INTO jobs (job_id, tenant_id, kind, status, created_at)"
                        " VALUES (%s, %s, %s, 'running', %s)", (job_id, tenant_id, kind, time.time()))
        return job_id

    def finish_job(self, job_id: str, status: str, report: dict[str, Any]) -> None:
        with self._tx() as cur:
            cur.execute("UPDATE jobs SET status = %s, finished_at = %s, report = %s WHERE job_id = %s",
                        (status, time.time(), json.dumps(report), job_id))

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM jobs WHERE job_id = %s", (job_id,))
        if not rows:
            return None
        job = dict(rows[0])
        job["report"] = json.loads(job["report"]) if job["report"] else None
        return job

    def add_dead_letter(self, job_id: str, tenant_id: str, source: str, code: str, reason: str,
                        meta: dict[str, Any]) -> int:
        validate_tenant_id(tenant_id)
        with self._tx() as cur:
            cur.execute("INSERT INTO dead_letters (job_id, tenant_id, source, code, reason, meta, created_at)"
                        " VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id",
                        (job_id, tenant_id, source, code, reason, json.dumps(meta), time.time()))
            return int(cur.fetchone()["id"])

    def dead_letters(self, tenant_id: str | None = None, include_retried: bool = False) -> list[dict[str, Any]]:
        rows = self._query(
            "SELECT * FROM dead_letters WHERE (%s::text IS NULL OR tenant_id = %s)"
            " AND (%s OR retried_at IS NULL) ORDER BY id",
            (tenant_id, tenant_id, include_retried),
        )
        return [{**r, "meta": json.loads(r["meta"])} for r in rows]

    def mark_dead_letter_retried(self, dead_letter_id: int) -> None:
        with self._tx() as cur:
            cur.execute("UPDATE dead_letters SET retried_at = %s WHERE id = %s", (time.time(), dead_letter_id))

    # ------------------------------------------------------------------ audit
    def audit(self, actor: str, action: str, tenant_id: str, target: str, detail: dict[str, Any]) -> None:
        with self._tx() as cur:
            _audit(cur, actor, action, tenant_id, target, detail)

    def audit_log(self, tenant_id: str | None = None) -> list[dict[str, Any]]:
        rows = self._query("SELECT * FROM audit_log WHERE (%s::text IS NULL OR tenant_id = %s) ORDER BY id",
                           (tenant_id, tenant_id))
        return [{**r, "detail": json.loads(r["detail"])} for r in rows]

    # ------------------------------------------------------------- answer log
    def log_answer(self, request_id: str, tenant_id: str, user_id: str, question: str,
                   response: dict[str, Any], correlation_id: str | None = None, cached: bool = False) -> int:
        """Append one row under a fresh row id (a repeated request id adds a row, never replaces one)."""
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO answer_log (request_id, correlation_id, ts, tenant_id, user_id, question, response,"
                " cached) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (request_id, correlation_id, time.time(), tenant_id, user_id, question, json.dumps(response),
                 bool(cached)),
            )
            return int(cur.fetchone()["id"])

    def answer_entry(self, request_id: str, tenant_id: str, user_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM answer_log WHERE request_id = %s AND tenant_id = %s AND user_id = %s"
                           " ORDER BY id DESC LIMIT 1", (request_id, tenant_id, user_id))
        return _answer_row(rows[0]) if rows else None

    def answer_log(self, tenant_id: str | None = None, limit: int = ANSWER_LOG_READ_LIMIT,
                   since: float | None = None) -> list[dict[str, Any]]:
        """The newest `limit` rows (of one tenant; logged at or after `since`), oldest first."""
        rows = self._query(
            """SELECT * FROM (SELECT * FROM answer_log WHERE (%s::text IS NULL OR tenant_id = %s) AND ts >= %s
                              ORDER BY id DESC LIMIT %s) AS newest ORDER BY id""",
            (tenant_id, tenant_id, float(since or 0.0), int(limit)),
        )
        return [_answer_row(r) for r in rows]

    def purge_answers(self, older_than_s: float) -> int:
        with self._tx() as cur:
            cur.execute("DELETE FROM answer_log WHERE ts < %s", (time.time() - older_than_s,))
            return cur.rowcount

    def forget_answers_citing(self, tenant_id: str, document_id: str) -> int:
        """The rows whose answer cites the document go, and the kept prompts of every request whose
        prompt held it as a source; Postgres reclaims their space at the next VACUUM."""
        with self._tx() as cur:
            cur.execute(
                "DELETE FROM prompt_vault WHERE tenant_id = %s AND request_id IN (SELECT request_id FROM answer_log"
                " WHERE tenant_id = %s AND (jsonb_path_exists(response::jsonb, '$.citations[*] ? (@.document_id == $doc)',"
                " jsonb_build_object('doc', %s::text)) OR jsonb_path_exists(response::jsonb,"
                " '$.sources[*] ? (@.document_id == $doc)', jsonb_build_object('doc', %s::text))))",
                (tenant_id, tenant_id, document_id, document_id))
            cur.execute(
                "DELETE FROM answer_log WHERE tenant_id = %s AND jsonb_path_exists(response::jsonb,"
                " '$.citations[*] ? (@.document_id == $doc)', jsonb_build_object('doc', %s::text))",
                (tenant_id, document_id))
            forgotten = cur.rowcount
            cur.execute(
                "DELETE FROM eval_candidates WHERE tenant_id = %s AND jsonb_path_exists(item::jsonb,"
                " '$.sources[*] ? (@.document_id == $doc)', jsonb_build_object('doc', %s::text))",
                (tenant_id, document_id))
            return forgotten

    # ----------------------------------------------- the prompt vault's rows (ciphertext only)
    def keep_prompt(self, request_id: str, tenant_id: str, user_id: str, kid: str, nonce: bytes,
                    ciphertext: bytes) -> None:
        with self._tx() as cur:
            cur.execute("INSERT INTO prompt_vault (request_id, ts, tenant_id, user_id, kid, nonce, ciphertext)"
                        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                        (request_id, time.time(), tenant_id, user_id, kid, bytes(nonce), bytes(ciphertext)))

    def kept_prompt(self, request_id: str) -> dict[str, Any] | None:
        """The newest vault row of this request id (ts, tenant_id, user_id, kid, nonce, ciphertext)."""
        rows = self._query("SELECT * FROM prompt_vault WHERE request_id = %s ORDER BY id DESC LIMIT 1", (request_id,))
        return {**rows[0], "nonce": bytes(rows[0]["nonce"]), "ciphertext": bytes(rows[0]["ciphertext"])} \
            if rows else None

    def purge_prompts(self, older_than_s: float) -> int:
        with self._tx() as cur:
            cur.execute("DELETE FROM prompt_vault WHERE ts < %s", (time.time() - older_than_s,))
            return cur.rowcount

    def known_users(self, limit: int = KNOWN_USERS_LIMIT) -> list[str]:
        """User ids the catalog has seen ask or vote (for masking their names in logs and spans)."""
        rows = self._query("SELECT user_id FROM answer_log UNION SELECT user_id FROM answer_feedback LIMIT %s",
                           (int(limit),))
        return [r["user_id"] for r in rows]

    def record_feedback(self, answer_id: str, tenant_id: str, user_id: str, vote: str, reason: str | None,
                        comment: str, sources: list[dict[str, Any]]) -> int:
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO answer_feedback (answer_id, ts, tenant_id, user_id, vote, reason, comment, sources)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (answer_id, time.time(), tenant_id, user_id, vote, reason, comment, json.dumps(sources)))
            return int(cur.fetchone()["id"])

    def feedback(self, tenant_id: str) -> list[dict[str, Any]]:
        rows = self._query("SELECT * FROM answer_feedback WHERE tenant_id = %s ORDER BY id", (tenant_id,))
        return [{**r, "sources": json.loads(r["sources"])} for r in rows]

    # ------------------------------------------------------------- candidate test items
    def queue_candidate(self, tenant_id: str, source: str, origin: str, item: dict[str, Any],
                        max_pending: int) -> int | None:
        validate_tenant_id(tenant_id)
        with self._tx() as cur:
            self._lock_tenant(cur, tenant_id)  # the count and the insert see every other writer's rows
            cur.execute("SELECT id FROM eval_candidates WHERE tenant_id = %s AND source = %s AND origin = %s",
                        (tenant_id, source, origin))
            known = cur.fetchone()
            if known is not None:
                return int(known["id"])
            cur.execute("SELECT COUNT(*) AS n FROM eval_candidates WHERE tenant_id = %s AND status = %s"
                        " AND source = %s", (tenant_id, CANDIDATE_PENDING, source))
            if cur.fetchone()["n"] >= max_pending:
                return None
            cur.execute("INSERT INTO eval_candidates (tenant_id, source, origin, status, item, created_at)"
                        " VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
                        (tenant_id, source, origin, CANDIDATE_PENDING, json.dumps(item), time.time()))
            return int(cur.fetchone()["id"])

    def candidates(self, tenant_id: str, source: str | None = None, status: str | None = None,
                   limit: int = CANDIDATES_READ_LIMIT, after_id: int = 0) -> list[dict[str, Any]]:
        rows = self._query("SELECT * FROM eval_candidates WHERE tenant_id = %s AND (%s::text IS NULL OR source = %s)"
                           " AND (%s::text IS NULL OR status = %s) AND id > %s ORDER BY id LIMIT %s",
                           (tenant_id, source, source, status, status, int(after_id), int(limit)))
        return [_candidate_row(r) for r in rows]

    def candidate(self, candidate_id: int) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM eval_candidates WHERE id = %s", (int(candidate_id),))
        return _candidate_row(rows[0]) if rows else None

    def decide_candidate(self, candidate_id: int, status: str, label: dict[str, Any] | None,
                         actor: str) -> dict[str, Any] | None:
        with self._tx() as cur:
            cur.execute("UPDATE eval_candidates SET status = %s, label = %s, decided_at = %s, decided_by = %s"
                        " WHERE id = %s AND status = %s RETURNING *",
                        (status, None if label is None else json.dumps(label), time.time(), actor,
                         int(candidate_id), CANDIDATE_PENDING))
            row = cur.fetchone()
            if row is None:
                return None
            decided = _candidate_row(row)
            _audit(cur, actor, f"candidate_{status}", decided["tenant_id"], str(decided["id"]),
                   {"source": decided["source"], "origin": decided["origin"]})
            return decided


def _record(row: dict[str, Any]) -> DocumentRecord:
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
        groups=tuple(row["groups"]),
    )


def _replace_groups(cur: psycopg.Cursor, tenant_id: str, document_id: str, groups: list[str],
                    force: bool = False) -> bool:
    cur.execute("SELECT group_name FROM document_acl WHERE tenant_id = %s AND document_id = %s",
                (tenant_id, document_id))
    current = {r["group_name"] for r in cur.fetchall()}
    wanted = set(groups)
    if current == wanted and not force:
        return False
    cur.execute("DELETE FROM document_acl WHERE tenant_id = %s AND document_id = %s", (tenant_id, document_id))
    if wanted:
        cur.executemany("INSERT INTO document_acl (tenant_id, document_id, group_name) VALUES (%s, %s, %s)",
                        [(tenant_id, document_id, g) for g in sorted(wanted)])
    cur.execute("UPDATE documents SET acl_version = acl_version + 1 WHERE tenant_id = %s AND document_id = %s",
                (tenant_id, document_id))
    return True


def _audit(cur: psycopg.Cursor, actor: str, action: str, tenant_id: str, target: str,
           detail: dict[str, Any]) -> None:
    cur.execute("INSERT INTO audit_log (ts, actor, action, tenant_id, target, detail)"
                " VALUES (%s, %s, %s, %s, %s, %s)", (time.time(), actor, action, tenant_id, target, json.dumps(detail)))


def _candidate_row(row: dict[str, Any]) -> dict[str, Any]:
    label = row["label"]
    return {**row, "id": int(row["id"]), "item": json.loads(row["item"]),
            "label": json.loads(label) if label is not None else None}


def _answer_row(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "cached": bool(row["cached"]), "response": json.loads(row["response"])}


@contextmanager
def _unavailable_on_error(operation: str) -> Iterator[None]:
    """A driver or pool error inside the block becomes CatalogUnavailable; its text stays in the log."""
    try:
        yield
    except psycopg.Error as error:
        log.warning("catalog %s failed: %s: %s", operation, type(error).__name__, error)
        raise CatalogUnavailable("the catalog is unavailable; try again shortly") from None
