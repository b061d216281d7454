"""SQLite approvals (DESIGN.md §10): the durable default, shared by the processes of one machine.

One table, `approvals`, in its own file (`config.home / "approvals.sqlite"`, see `make_approval_store`),
opened with the state files' helper (`SQLiteFile`, citadel/state/sqlite_file.py: WAL, a busy timeout, `BEGIN IMMEDIATE` writes, every
sqlite3 error raised as StateUnavailable). UNIQUE (run_id, step_id) keeps one approval per step, so a
resumed run's second request finds the first. A decision is one conditional
`UPDATE … WHERE status = 'pending' AND (expire_at IS NULL OR expire_at > now)`: of two reviewers, in
two processes or two threads, exactly one changes the row; the other is told Conflict. A sweep selects
and updates the due rows inside one write transaction, so two processes sweeping at once never report
the same approval twice. Arguments are JSON text columns, bounded by MAX_ARGS_CHARS; times come from
the injected clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from citadel.errors import Conflict, NotFound
from citadel.state.sqlite_file import SQLiteFile
from citadel.tools.approvals import (
    MAX_SWEEP,
    Approval,
    ApprovalStatus,
    Clock,
    checked_decision,
    group_set,
    list_limit,
    new_pending,
    TaskKind,
    refused_decision,
)

_PENDING = f"status = '{ApprovalStatus.PENDING.value}'"

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS approvals (
        approval_id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        step_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        requester TEXT NOT NULL,
        proposed_args_json TEXT NOT NULL,
        approver_group TEXT NOT NULL,
        lead_group TEXT,
        escalate_at REAL,
        expire_at REAL,
        status TEXT NOT NULL,
        escalated INTEGER NOT NULL,
        final_args_json TEXT,
        decided_by TEXT,
        decided_at REAL,
        comment TEXT NOT NULL,
        honeypot INTEGER NOT NULL,
        created_at REAL NOT NULL,
        kind TEXT NOT NULL,
        reason TEXT,
        context_json TEXT NOT NULL,
        UNIQUE (run_id, step_id))""",
    "CREATE INDEX IF NOT EXISTS approvals_by_tenant ON approvals (tenant_id, status, created_at)",
    # The sweep reads only pending rows that have a deadline, from these partial indexes.
    f"CREATE INDEX IF NOT EXISTS approvals_to_expire ON approvals (expire_at) "
    f"WHERE {_PENDING} AND expire_at IS NOT NULL",
    f"CREATE INDEX IF NOT EXISTS approvals_to_escalate ON approvals (escalate_at) "
    f"WHERE {_PENDING} AND escalated = 0 AND escalate_at IS NOT NULL",
)

_COLUMNS = ("approval_id, tenant_id, run_id, step_id, tool, requester, proposed_args_json, approver_group, "
            "lead_group, escalate_at, expire_at, status, escalated, final_args_json, decided_by, decided_at, "
            "comment, honeypot, created_at, kind, reason, context_json")


class SQLiteApprovalStore:
    """Approvals in a SQLite file, implementing `ApprovalStore` (see citadel/tools/approvals.py)."""

    def __init__(self, path: str | Path, clock: Clock):
        self._now = clock
        self._file = SQLiteFile(path, _SCHEMA, "approval store")

    def close(self) -> None:
        self._file.close()

    def request(self, approval: Approval) -> Approval:
        stored, args_json = new_pending(approval, self._now())
        with self._file.write() as db:
            # The write lock is held from BEGIN IMMEDIATE: no other process can request this step, or
            # take this id, between these reads and the insert.
            row = db.execute(f"SELECT {_COLUMNS} FROM approvals WHERE run_id = ? AND step_id = ?",
                             (stored.run_id, stored.step_id)).fetchone()
            if row is not None:
                return _approval(row)
            if db.execute("SELECT 1 FROM approvals WHERE approval_id = ?", (stored.approval_id,)).fetchone():
                raise Conflict(f"approval id {stored.approval_id!r} is taken by another step", code="approval_exists")
            db.execute(f"INSERT INTO approvals ({_COLUMNS}) VALUES ({', '.join('?' * len(_COLUMNS.split(',')))})",
                       _row(stored, args_json))
        return stored

    def get(self, approval_id: str) -> Approval | None:
        rows = self._file.read(f"SELECT {_COLUMNS} FROM approvals WHERE approval_id = ?", (approval_id,))
        return _approval(rows[0]) if rows else None

    def for_step(self, run_id: str, step_id: str) -> Approval | None:
        rows = self._file.read(f"SELECT {_COLUMNS} FROM approvals WHERE run_id = ? AND step_id = ?",
                               (run_id, step_id))
        return _approval(rows[0]) if rows else None

    def pending_counts(self) -> dict[tuple[str, str], int]:
        rows = self._file.read("SELECT tool, kind, COUNT(*) FROM approvals WHERE status = ? GROUP BY tool, kind",
                               (ApprovalStatus.PENDING.value,))
        return {(tool, kind): int(count) for tool, kind, count in rows}

    def list(self, tenant_id: str, groups: Iterable[str], status: ApprovalStatus | None = ApprovalStatus.PENDING,
             limit: int = 100) -> list[Approval]:
        wanted, count = group_set(groups), list_limit(limit)
        if not wanted or count == 0:
            return []
        status_text = None if status is None else ApprovalStatus(status).value
        # The groups travel as one JSON array (json_each), so a user in many groups needs no variables.
        rows = self._file.read(
            f"SELECT {_COLUMNS} FROM approvals WHERE tenant_id = :tenant "
            "AND (:status IS NULL OR status = :status) "
            "AND (approver_group IN (SELECT value FROM json_each(:groups)) "
            "     OR (escalated = 1 AND lead_group IN (SELECT value FROM json_each(:groups)))) "
            "ORDER BY created_at, rowid LIMIT :limit",
            {"tenant": tenant_id, "status": status_text, "groups": json.dumps(sorted(wanted)), "limit": count},
        )
        return [_approval(row) for row in rows]

    def decide(self, approval_id: str, status: ApprovalStatus, decided_by: str, final_args: dict | None,
               comment: str = "") -> Approval:
        decided, decided_by, final_json, comment = checked_decision(status, decided_by, final_args, comment)
        now = self._now()
        with self._file.write() as db:
            # One conditional statement: only a pending, unexpired row changes, so of two deciders
            # exactly one wins. An approval without final arguments approves the proposed ones.
            changed = db.execute(
                "UPDATE approvals SET status = :status, decided_by = :by, decided_at = :now, comment = :comment, "
                "final_args_json = CASE WHEN :final IS NOT NULL THEN :final "
                "                       WHEN :approved THEN proposed_args_json END "
                f"WHERE approval_id = :id AND {_PENDING} AND (expire_at IS NULL OR expire_at > :now)",
                {"status": decided.value, "by": decided_by, "now": now, "comment": comment, "final": final_json,
                 "approved": decided is ApprovalStatus.APPROVED, "id": approval_id},
            ).rowcount
            row = db.execute(f"SELECT {_COLUMNS} FROM approvals WHERE approval_id = ?", (approval_id,)).fetchone()
        if row is None:
            raise NotFound(f"no approval {approval_id!r}")
        approval = _approval(row)
        if not changed:
            raise refused_decision(approval)
        return approval

    def sweep(self, now: float | None = None) -> tuple[list[Approval], list[Approval]]:
        at = self._now() if now is None else float(now)
        with self._file.write() as db:
            # Expire first: an approval past both deadlines is reported expired, not escalated on its way out.
            due = [_approval(row) for row in db.execute(
                f"SELECT {_COLUMNS} FROM approvals WHERE {_PENDING} AND expire_at IS NOT NULL AND expire_at <= ? "
                "ORDER BY expire_at, rowid LIMIT ?", (at, MAX_SWEEP))]
            db.executemany(f"UPDATE approvals SET status = ?, decided_at = ? WHERE approval_id = ? AND {_PENDING}",
                           [(ApprovalStatus.EXPIRED.value, at, a.approval_id) for a in due])
            expired = [replace(a, status=ApprovalStatus.EXPIRED, decided_at=at) for a in due]
            due = [_approval(row) for row in db.execute(
                f"SELECT {_COLUMNS} FROM approvals WHERE {_PENDING} AND escalated = 0 AND escalate_at IS NOT NULL "
                "AND escalate_at <= ? ORDER BY escalate_at, rowid LIMIT ?", (at, MAX_SWEEP))]
            db.executemany(f"UPDATE approvals SET escalated = 1 WHERE approval_id = ? AND {_PENDING}",
                           [(a.approval_id,) for a in due])
            escalated = [replace(a, escalated=True) for a in due]
        return escalated, expired


def _row(approval: Approval, args_json: str) -> tuple:
    return (approval.approval_id, approval.tenant_id, approval.run_id, approval.step_id, approval.tool,
            approval.requester, args_json, approval.approver_group, approval.lead_group, approval.escalate_at,
            approval.expire_at, ApprovalStatus(approval.status).value, int(approval.escalated), None,
            approval.decided_by, approval.decided_at, approval.comment, int(approval.honeypot), approval.created_at,
            str(approval.kind), approval.reason, json.dumps(approval.context, separators=(",", ":")))


def _approval(row: tuple) -> Approval:
    (approval_id, tenant_id, run_id, step_id, tool, requester, proposed_json, approver_group, lead_group,
     escalate_at, expire_at, status, escalated, final_json, decided_by, decided_at, comment, honeypot,
     created_at, kind, reason, context_json) = row
    return Approval(approval_id, tenant_id, run_id, step_id, tool, requester, json.loads(proposed_json),
                    approver_group, lead_group, escalate_at, expire_at, ApprovalStatus(status), bool(escalated),
                    None if final_json is None else json.loads(final_json), decided_by, decided_at, comment,
                    bool(honeypot), created_at, TaskKind(kind), reason, json.loads(context_json))
