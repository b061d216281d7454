"""SQLite implementation of the Catalog (the embedded default).

Every database error leaves as `CatalogUnavailable` (the Catalog protocol's one failure), with the
SQLite message and path in the server log only: callers fail closed without importing sqlite3.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

from citadel.catalog.base import (CANDIDATE_PENDING, CANDIDATES_READ_LIMIT, SENSITIVE_DATA_REASON, WITHHELD_QUESTION,
                                  DocumentRecord, LatestVersion, ReadableDoc, StagedVersion, decide_next_version)
from citadel.errors import CatalogUnavailable, NotFound
from citadel.types import Principal, validate_tenant_id

# Statuses under which a document may be read at all; everything else is excluded at query time.
READABLE_STATUS = "published"
TENANT_WIDE = "tenant"
# SQLite's default limit on bound parameters is 999; IN lists stay well under it.
_SQL_PARAMETER_BATCH = 500
# Rows `answer_log()` returns at most (it is for operators and tests, not bulk export).
ANSWER_LOG_READ_LIMIT = 1_000
# Most user ids `known_users()` returns (it seeds a masker held in memory by every process).
KNOWN_USERS_LIMIT = 100_000
# The first answer-log layout (keyed by the client's request id), renamed while it is migrated.
_FIRST_ANSWER_LOG = "answer_log_v1"

# An answer-log row's answer cites the document (and so may quote it; its `passages` list holds ids only).
_CITES_DOCUMENT = ("EXISTS (SELECT 1 FROM json_each(response, '$.citations') AS item"
                   " WHERE json_extract(item.value, '$.document_id') = ?)")
# A request whose prompt held the document among its numbered sources (the answer log's `sources`).
_PROMPTED_DOCUMENT = ("EXISTS (SELECT 1 FROM json_each(response, '$.sources') AS item"
                      " WHERE json_extract(item.value, '$.document_id') = ?)")
# A candidate test item's answer cites the document (its `sources`; a tool item has none).
_ITEM_CITES_DOCUMENT = ("EXISTS (SELECT 1 FROM json_each(item, '$.sources') AS source"
                        " WHERE json_extract(source.value, '$.document_id') = ?)")

log = logging.getLogger(__name__)


class SQLiteCatalog:
    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute("PRAGMA busy_timeout=5000")
        # Deleted rows are overwritten with zeros, not left in free pages: a withdrawal's deleted
        # answers must not be recoverable from the file (citadel/ingest/withdrawal.py).
        self._conn.execute("PRAGMA secure_delete=ON")
        schema = resources.files("citadel.catalog").joinpath("schema.sql").read_text()
        _set_aside_first_answer_log(self._conn)
        self._conn.executescript(schema)
        self._move_first_answer_log()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One atomic write transaction: all of it is visible, or none of it."""
        with self._lock:
            with _unavailable_on_error("write"):
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")

    def _query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock, _unavailable_on_error("read"):
            return _fetch_all(self._conn, sql, args)

    # ----------------------------------------------------------------- tenants
    def ensure_tenant(self, tenant_id: str) -> None:
        # Every tenant-scoped write checks the id (jobs and audit rows may carry "*" and "-" instead).
        validate_tenant_id(tenant_id)
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO tenants (tenant_id, created_at) VALUES (?, ?)",
                (tenant_id, time.time()),
            )

    def list_tenants(self) -> list[dict[str, Any]]:
        rows = self._query(
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
        return [dict(r) for r in rows]

    # --------------------------------------------------------------- documents
    def _groups(self, tenant_id: str, document_id: str) -> tuple[str, ...]:
        rows = self._query(
            "SELECT group_name FROM document_acl WHERE tenant_id=? AND document_id=? ORDER BY group_name",
            (tenant_id, document_id),
        )
        return tuple(r["group_name"] for r in rows)

    def _record(self, row: sqlite3.Row) -> DocumentRecord:
        latest = self._query(
            "SELECT COALESCE(MAX(version), 0) AS v FROM document_versions WHERE tenant_id=? AND document_id=?",
            (row["tenant_id"], row["document_id"]),
        )[0]["v"]
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
            latest_version=latest,
            acl_version=row["acl_version"],
            groups=self._groups(row["tenant_id"], row["document_id"]),
        )

    def get_document(self, tenant_id: str, document_id: str) -> DocumentRecord | None:
        rows = self._query(
            "SELECT * FROM documents WHERE tenant_id=? AND document_id=?", (tenant_id, document_id)
        )
        return self._record(rows[0]) if rows else None

    def list_documents(self, tenant_id: str) -> list[DocumentRecord]:
        rows = self._query("SELECT * FROM documents WHERE tenant_id=? ORDER BY document_id", (tenant_id,))
        return [self._record(r) for r in rows]

    def next_version(
        self, tenant_id: str, document_id: str, content_hash: str, requested: int | None = None
    ) -> tuple[int, bool]:
        """The version a new upload gets, and whether it is the published content already."""
        rows = self._query(
            "SELECT version, content_hash, status FROM document_versions WHERE tenant_id=? AND document_id=?"
            " ORDER BY version DESC LIMIT 1",
            (tenant_id, document_id),
        )
        latest = LatestVersion(rows[0]["version"], rows[0]["content_hash"], rows[0]["status"]) if rows else None
        return decide_next_version(document_id, latest, content_hash, requested)

    def latest_versions(self, tenant_ids: list[str]) -> dict[tuple[str, str], LatestVersion]:
        """The newest version of every document of these tenants, keyed by (tenant, document)."""
        latest: dict[tuple[str, str], LatestVersion] = {}
        for start in range(0, len(tenant_ids), _SQL_PARAMETER_BATCH):
            batch = tenant_ids[start : start + _SQL_PARAMETER_BATCH]
            placeholders = ",".join("?" * len(batch))
            rows = self._query(
                f"""SELECT v.tenant_id, v.document_id, v.version, v.content_hash, v.status
                    FROM document_versions v JOIN (
                        SELECT tenant_id, document_id, MAX(version) AS version FROM document_versions
                        WHERE tenant_id IN ({placeholders}) GROUP BY tenant_id, document_id
                    ) m ON m.tenant_id = v.tenant_id AND m.document_id = v.document_id AND m.version = v.version""",
                tuple(batch),
            )
            for r in rows:
                latest[(r["tenant_id"], r["document_id"])] = LatestVersion(r["version"], r["content_hash"], r["status"])
        return latest

    def manifest(self, tenant_id: str, document_id: str, version: int) -> list[str]:
        rows = self._query(
            "SELECT chunk_id FROM chunk_manifests WHERE tenant_id=? AND document_id=? AND version=?"
            " ORDER BY chunk_id",
            (tenant_id, document_id, version),
        )
        return [r["chunk_id"] for r in rows]

    def document_chunk_ids(self, tenant_id: str, document_id: str) -> set[str]:
        rows = self._query("SELECT chunk_id FROM chunk_manifests WHERE tenant_id=? AND document_id=?",
                           (tenant_id, document_id))
        return {r["chunk_id"] for r in rows}

    # -------------------------------------------------------------- publishing
    def published_segment(self, tenant_id: str) -> str | None:
        rows = self._query("SELECT segment_id FROM partitions WHERE tenant_id=?", (tenant_id,))
        return rows[0]["segment_id"] if rows else None

    def publish(
        self, tenant_id: str, segment_id: str, tier: str, staged: list[StagedVersion], job_id: str
    ) -> None:
        """The atomic pointer switch: new versions, superseded ones, ACLs and the segment pointer."""
        validate_tenant_id(tenant_id)
        now = time.time()
        with self._tx() as db:
            for item in staged:
                self._publish_version(db, item, segment_id, job_id, now)
            db.execute(
                """INSERT INTO partitions (tenant_id, segment_id, tier, generation, published_at)
                   VALUES (?, ?, ?, 1, ?)
                   ON CONFLICT(tenant_id) DO UPDATE SET segment_id=excluded.segment_id,
                       tier=excluded.tier, generation=partitions.generation + 1,
                       published_at=excluded.published_at""",
                (tenant_id, segment_id, tier, now),
            )
            self._audit(db, "ingest", "publish", tenant_id, segment_id,
                        {"job_id": job_id, "documents": [s.meta.document_id for s in staged]})

    def _publish_version(
        self, db: sqlite3.Connection, item: StagedVersion, segment_id: str, job_id: str, now: float
    ) -> None:
        meta = item.meta
        key = (meta.tenant_id, meta.document_id)
        db.execute(
            "UPDATE document_versions SET status='superseded' WHERE tenant_id=? AND document_id=?"
            " AND status='published'",
            key,
        )
        db.execute(
            """INSERT INTO document_versions (tenant_id, document_id, version, status, content_hash,
                   chunk_count, segment_id, job_id, created_at)
               VALUES (?, ?, ?, 'published', ?, ?, ?, ?, ?)""",
            (*key, item.version, item.content_hash, len(item.chunk_ids), segment_id, job_id, now),
        )
        db.executemany(
            "INSERT INTO chunk_manifests (tenant_id, document_id, version, chunk_id, content_hash)"
            " VALUES (?, ?, ?, ?, ?)",
            [(*key, item.version, cid, h) for cid, h in zip(item.chunk_ids, item.chunk_hashes)],
        )
        db.execute(
            """INSERT INTO documents (tenant_id, document_id, title, source, owner, visibility,
                   effective_date, supersedes, status, published_version, acl_version, updated_at)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'published', ?, 0, ?)
               ON CONFLICT(tenant_id, document_id) DO UPDATE SET title=excluded.title,
                   source=excluded.source, owner=excluded.owner, visibility=excluded.visibility,
                   effective_date=excluded.effective_date, supersedes=excluded.supersedes,
                   status='published', published_version=excluded.published_version,
                   updated_at=excluded.updated_at""",
            (*key, meta.title or meta.document_id, meta.source, meta.owner, meta.visibility,
             meta.effective_date, meta.supersedes, item.version, now),
        )
        # A new document starts at acl_version 0 and its first group set makes it 1.
        self._replace_groups(db, meta.tenant_id, meta.document_id, list(meta.groups), force=True)
        # Re-publishing a document that a published successor names in `supersedes` keeps it retired.
        db.execute(
            """UPDATE documents SET status='superseded' WHERE tenant_id=? AND document_id=? AND EXISTS (
                   SELECT 1 FROM documents n WHERE n.tenant_id=documents.tenant_id
                     AND n.supersedes=documents.document_id AND n.status='published')""",
            key,
        )
        if meta.supersedes:
            # A document that names its predecessor retires it in the same transaction.
            db.execute(
                "UPDATE documents SET status='superseded', updated_at=? WHERE tenant_id=? AND document_id=?"
                " AND status='published'",
                (now, meta.tenant_id, meta.supersedes),
            )

    def _replace_groups(self, db: sqlite3.Connection, tenant_id: str, document_id: str,
                        groups: list[str], force: bool = False) -> bool:
        current = {r[0] for r in db.execute(
            "SELECT group_name FROM document_acl WHERE tenant_id=? AND document_id=?", (tenant_id, document_id))}
        wanted = set(groups)
        if current == wanted and not force:
            return False
        db.execute("DELETE FROM document_acl WHERE tenant_id=? AND document_id=?", (tenant_id, document_id))
        db.executemany(
            "INSERT INTO document_acl (tenant_id, document_id, group_name) VALUES (?, ?, ?)",
            [(tenant_id, document_id, g) for g in sorted(wanted)],
        )
        db.execute(
            "UPDATE documents SET acl_version = acl_version + 1 WHERE tenant_id=? AND document_id=?",
            (tenant_id, document_id),
        )
        return True

    # ------------------------------------------------------------- permissions
    def readable_documents(self, principal: Principal) -> dict[str, ReadableDoc]:
        """Every document version this principal may read now: published, current, ACL-permitted."""
        groups = sorted(principal.groups)
        placeholders = ",".join("?" * len(groups)) or "NULL"
        rows = self._query(
            f"""SELECT d.document_id, d.published_version, d.title, d.source FROM documents d
                WHERE d.tenant_id = ? AND d.status = ? AND d.published_version IS NOT NULL
                  AND (d.visibility = ? OR EXISTS (
                       SELECT 1 FROM document_acl a WHERE a.tenant_id = d.tenant_id
                         AND a.document_id = d.document_id AND a.group_name IN ({placeholders})))""",
            (principal.tenant_id, READABLE_STATUS, TENANT_WIDE, *groups),
        )
        return {
            r["document_id"]: ReadableDoc(r["document_id"], r["published_version"], r["title"], r["source"])
            for r in rows
        }

    def set_acl(self, tenant_id: str, document_id: str, groups: list[str], actor: str) -> int:
        validate_tenant_id(tenant_id)
        with self._tx() as db:
            row = db.execute(
                "SELECT acl_version FROM documents WHERE tenant_id=? AND document_id=?", (tenant_id, document_id)
            ).fetchone()
            if row is None:
                raise NotFound(f"no document {document_id!r} in tenant {tenant_id!r}")
            visibility = TENANT_WIDE if "*" in groups else "groups"
            db.execute("UPDATE documents SET visibility=?, updated_at=? WHERE tenant_id=? AND document_id=?",
                       (visibility, time.time(), tenant_id, document_id))
            self._replace_groups(db, tenant_id, document_id, [g for g in groups if g != "*"])
            version = db.execute(
                "SELECT acl_version FROM documents WHERE tenant_id=? AND document_id=?", (tenant_id, document_id)
            ).fetchone()[0]
            self._audit(db, actor, "acl_set", tenant_id, document_id, {"groups": groups, "acl_version": version})
            return version

    def withdraw(self, tenant_id: str, document_id: str, actor: str) -> None:
        validate_tenant_id(tenant_id)
        with self._tx() as db:
            cursor = db.execute(
                "UPDATE documents SET status='withdrawn', updated_at=? WHERE tenant_id=? AND document_id=?",
                (time.time(), tenant_id, document_id),
            )
            if cursor.rowcount == 0:
                raise NotFound(f"no document {document_id!r} in tenant {tenant_id!r}")
            db.execute(
                "UPDATE document_versions SET status='withdrawn' WHERE tenant_id=? AND document_id=?"
                " AND status='published'",
                (tenant_id, document_id),
            )
            self._audit(db, actor, "withdraw", tenant_id, document_id, {})

    # ------------------------------------------------------ jobs, dead letters
    def create_job(self, tenant_id: str, kind: str) -> str:
        job_id = uuid.uuid4().hex[:16]
        with self._tx() as db:
            db.execute(
                "INSERT INTO jobs (job_id, tenant_id, kind, status, created_at) VALUES (?, ?, ?, 'running', ?)",
                (job_id, tenant_id, kind, time.time()),
            )
        return job_id

    def finish_job(self, job_id: str, status: str, report: dict[str, Any]) -> None:
        with self._tx() as db:
            db.execute("UPDATE jobs SET status=?, finished_at=?, report=? WHERE job_id=?",
                       (status, time.time(), json.dumps(report), job_id))

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM jobs WHERE job_id=?", (job_id,))
        if not rows:
            return None
        job = dict(rows[0])
        job["report"] = json.loads(job["report"]) if job["report"] else None
        return job

    def add_dead_letter(self, job_id: str, tenant_id: str, source: str, code: str, reason: str,
                        meta: dict[str, Any]) -> int:
        validate_tenant_id(tenant_id)
        with self._tx() as db:
            cursor = db.execute(
                "INSERT INTO dead_letters (job_id, tenant_id, source, code, reason, meta, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job_id, tenant_id, source, code, reason, json.dumps(meta), time.time()),
            )
            return int(cursor.lastrowid)

    def dead_letters(self, tenant_id: str | None = None, include_retried: bool = False) -> list[dict[str, Any]]:
        sql = "SELECT * FROM dead_letters WHERE 1=1"
        args: tuple = ()
        if tenant_id is not None:
            sql += " AND tenant_id=?"
            args = (tenant_id,)
        if not include_retried:
            sql += " AND retried_at IS NULL"
        rows = self._query(sql + " ORDER BY id", args)
        return [{**dict(r), "meta": json.loads(r["meta"])} for r in rows]

    def mark_dead_letter_retried(self, dead_letter_id: int) -> None:
        with self._tx() as db:
            db.execute("UPDATE dead_letters SET retried_at=? WHERE id=?", (time.time(), dead_letter_id))

    # ------------------------------------------------------------------ audit
    def _audit(self, db: sqlite3.Connection, actor: str, action: str, tenant_id: str, target: str,
               detail: dict[str, Any]) -> None:
        db.execute(
            "INSERT INTO audit_log (ts, actor, action, tenant_id, target, detail) VALUES (?, ?, ?, ?, ?, ?)",
            (time.time(), actor, action, tenant_id, target, json.dumps(detail)),
        )

    def audit(self, actor: str, action: str, tenant_id: str, target: str, detail: dict[str, Any]) -> None:
        with self._tx() as db:
            self._audit(db, actor, action, tenant_id, target, detail)

    def audit_log(self, tenant_id: str | None = None) -> list[dict[str, Any]]:
        if tenant_id is None:
            rows = self._query("SELECT * FROM audit_log ORDER BY id")
        else:
            rows = self._query("SELECT * FROM audit_log WHERE tenant_id=? ORDER BY id", (tenant_id,))
        return [{**dict(r), "detail": json.loads(r["detail"])} for r in rows]

    # ------------------------------------------------------------- answer log
    def log_answer(self, request_id: str, tenant_id: str, user_id: str, question: str,
                   response: dict[str, Any], correlation_id: str | None = None, cached: bool = False) -> int:
        """Append one row (a plain INSERT under a fresh row id: a repeated request id, the server's
        or the client's correlation id, adds a row and never replaces one). Returns the row id."""
        with self._tx() as db:
            cursor = db.execute(
                "INSERT INTO answer_log (request_id, correlation_id, ts, tenant_id, user_id, question, response,"
                " cached) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (request_id, correlation_id, time.time(), tenant_id, user_id, question, json.dumps(response),
                 int(cached)),
            )
            return int(cursor.lastrowid)

    def answer_entry(self, request_id: str, tenant_id: str, user_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM answer_log WHERE request_id=? AND tenant_id=? AND user_id=? "
                           "ORDER BY id DESC LIMIT 1", (request_id, tenant_id, user_id))
        return _answer_row(rows[0]) if rows else None

    def record_feedback(self, answer_id: str, tenant_id: str, user_id: str, vote: str, reason: str | None,
                        comment: str, sources: list[dict[str, Any]]) -> int:
        with self._tx() as db:
            cursor = db.execute(
                "INSERT INTO answer_feedback (answer_id, ts, tenant_id, user_id, vote, reason, comment, sources)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (answer_id, time.time(), tenant_id, user_id, vote, reason, comment, json.dumps(sources)))
            return int(cursor.lastrowid)

    def feedback(self, tenant_id: str) -> list[dict[str, Any]]:
        rows = self._query("SELECT * FROM answer_feedback WHERE tenant_id=? ORDER BY id", (tenant_id,))
        return [{**dict(r), "sources": json.loads(r["sources"])} for r in rows]

    # ------------------------------------------------------------- candidate test items
    def queue_candidate(self, tenant_id: str, source: str, origin: str, item: dict[str, Any],
                        max_pending: int) -> int | None:
        validate_tenant_id(tenant_id)
        with self._tx() as db:
            known = db.execute("SELECT id FROM eval_candidates WHERE tenant_id=? AND source=? AND origin=?",
                               (tenant_id, source, origin)).fetchone()
            if known is not None:
                return int(known["id"])
            pending = db.execute("SELECT COUNT(*) FROM eval_candidates WHERE tenant_id=? AND status=? AND source=?",
                                 (tenant_id, CANDIDATE_PENDING, source)).fetchone()[0]
            if pending >= max_pending:
                return None
            cursor = db.execute(
                "INSERT INTO eval_candidates (tenant_id, source, origin, status, item, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (tenant_id, source, origin, CANDIDATE_PENDING, json.dumps(item), time.time()))
            return int(cursor.lastrowid)

    def candidates(self, tenant_id: str, source: str | None = None, status: str | None = None,
                   limit: int = CANDIDATES_READ_LIMIT, after_id: int = 0) -> list[dict[str, Any]]:
        rows = self._query("SELECT * FROM eval_candidates WHERE tenant_id=? AND (? IS NULL OR source=?)"
                           " AND (? IS NULL OR status=?) AND id > ? ORDER BY id LIMIT ?",
                           (tenant_id, source, source, status, status, int(after_id), int(limit)))
        return [_candidate_row(r) for r in rows]

    def candidate(self, candidate_id: int) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM eval_candidates WHERE id=?", (int(candidate_id),))
        return _candidate_row(rows[0]) if rows else None

    def decide_candidate(self, candidate_id: int, status: str, label: dict[str, Any] | None,
                         actor: str) -> dict[str, Any] | None:
        with self._tx() as db:
            row = db.execute(
                "UPDATE eval_candidates SET status=?, label=?, decided_at=?, decided_by=? WHERE id=? AND status=?"
                " RETURNING *",
                (status, None if label is None else json.dumps(label), time.time(), actor, int(candidate_id),
                 CANDIDATE_PENDING)).fetchone()
            if row is None:
                return None
            decided = _candidate_row(row)
            self._audit(db, actor, f"candidate_{status}", decided["tenant_id"], str(decided["id"]),
                        {"source": decided["source"], "origin": decided["origin"]})
            return decided

    def answer_log(self, tenant_id: str | None = None, limit: int = ANSWER_LOG_READ_LIMIT,
                   since: float | None = None) -> list[dict[str, Any]]:
        """The newest `limit` rows (of one tenant; logged at or after `since`), oldest first."""
        where, args = ("WHERE ts >= ?", (float(since or 0.0),))
        if tenant_id is not None:
            where, args = f"{where} AND tenant_id=?", (*args, tenant_id)
        rows = self._query(f"SELECT * FROM (SELECT * FROM answer_log {where} ORDER BY id DESC LIMIT ?) ORDER BY id",
                           (*args, int(limit)))
        return [_answer_row(r) for r in rows]

    def _move_first_answer_log(self) -> None:
        """Finish the migration `_set_aside_first_answer_log` began: copy the old rows into the
        append-only table (withholding any question that was refused as sensitive data, which the
        first layout stored verbatim) and drop the old table, in one transaction. Safe to re-run."""
        with self._tx() as db:
            if not _table_columns(db, _FIRST_ANSWER_LOG):
                return
            db.execute(
                f"""INSERT INTO answer_log (request_id, correlation_id, ts, tenant_id, user_id, question, response)
                    SELECT request_id, NULL, ts, tenant_id, user_id,
                           CASE WHEN json_valid(response) AND json_extract(response, '$.reason') = ?
                                THEN ? ELSE question END,
                           response
                    FROM {_FIRST_ANSWER_LOG} ORDER BY ts""",
                (SENSITIVE_DATA_REASON, WITHHELD_QUESTION),
            )
            db.execute(f"DROP TABLE {_FIRST_ANSWER_LOG}")

    def purge_answers(self, older_than_s: float) -> int:
        with self._tx() as db:
            return db.execute("DELETE FROM answer_log WHERE ts < ?", (time.time() - older_than_s,)).rowcount

    # ----------------------------------------------- the prompt vault's rows (ciphertext only)
    def keep_prompt(self, request_id: str, tenant_id: str, user_id: str, kid: str, nonce: bytes,
                    ciphertext: bytes) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO prompt_vault (request_id, ts, tenant_id, user_id, kid, nonce, ciphertext)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (request_id, time.time(), tenant_id, user_id, kid, bytes(nonce), bytes(ciphertext)))

    def kept_prompt(self, request_id: str) -> dict[str, Any] | None:
        """The newest vault row of this request id (ts, tenant_id, user_id, kid, nonce, ciphertext)."""
        rows = self._query("SELECT * FROM prompt_vault WHERE request_id=? ORDER BY id DESC LIMIT 1", (request_id,))
        return {**dict(rows[0]), "nonce": bytes(rows[0]["nonce"]), "ciphertext": bytes(rows[0]["ciphertext"])} \
            if rows else None

    def purge_prompts(self, older_than_s: float) -> int:
        with self._tx() as db:
            return db.execute("DELETE FROM prompt_vault WHERE ts < ?", (time.time() - older_than_s,)).rowcount

    def known_users(self, limit: int = KNOWN_USERS_LIMIT) -> list[str]:
        """User ids the catalog has seen ask or vote (for masking their names in logs and spans)."""
        rows = self._query("SELECT user_id FROM answer_log UNION SELECT user_id FROM answer_feedback LIMIT ?",
                           (int(limit),))
        return [r["user_id"] for r in rows]

    def forget_answers_citing(self, tenant_id: str, document_id: str) -> int:
        """The rows whose answer cites the document go, and the kept prompts of every request whose
        prompt held it as a source (encrypted, but its text all the same)."""
        with self._tx() as db:
            db.execute(
                "DELETE FROM prompt_vault WHERE tenant_id = ? AND request_id IN (SELECT request_id FROM answer_log"
                f" WHERE tenant_id = ? AND json_valid(response) AND ({_CITES_DOCUMENT} OR {_PROMPTED_DOCUMENT}))",
                (tenant_id, tenant_id, document_id, document_id))
            forgotten = db.execute(
                f"DELETE FROM answer_log WHERE tenant_id = ? AND json_valid(response) AND {_CITES_DOCUMENT}",
                (tenant_id, document_id)).rowcount
            db.execute("DELETE FROM eval_candidates WHERE tenant_id = ? AND json_valid(item)"
                       f" AND {_ITEM_CITES_DOCUMENT}", (tenant_id, document_id))
        self._truncate_wal()
        return forgotten

    def _truncate_wal(self) -> None:
        """Copy the WAL into the database and empty it: the WAL still holds the pages as they were
        before the delete. Best effort: a reader of another process may keep it from finishing, and
        the next checkpoint overwrites those frames anyway."""
        with self._lock, _unavailable_on_error("checkpoint"):
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _table_columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _set_aside_first_answer_log(db: sqlite3.Connection) -> None:
    """A catalog from before the append-only answer log keyed its rows by the client's request id:
    rename that table out of the way so the schema creates the new one (one atomic statement; the
    rows move in `_move_first_answer_log`)."""
    columns = _table_columns(db, "answer_log")
    if columns and "id" not in columns:
        db.execute(f"ALTER TABLE answer_log RENAME TO {_FIRST_ANSWER_LOG}")


def _candidate_row(row: sqlite3.Row) -> dict[str, Any]:
    label = row["label"]
    return {**dict(row), "item": json.loads(row["item"]), "label": json.loads(label) if label is not None else None}


def _answer_row(row: sqlite3.Row) -> dict[str, Any]:
    return {**dict(row), "cached": bool(row["cached"]), "response": json.loads(row["response"])}


def _fetch_all(conn: sqlite3.Connection, sql: str, args: tuple) -> list[sqlite3.Row]:
    return conn.execute(sql, args).fetchall()


@contextmanager
def _unavailable_on_error(operation: str) -> Iterator[None]:
    """A database error inside the block becomes CatalogUnavailable; its text stays in the log."""
    try:
        yield
    except sqlite3.Error as error:
        log.warning("catalog %s failed: %s: %s", operation, type(error).__name__, error)
        raise CatalogUnavailable("the catalog is unavailable; try again shortly") from None
