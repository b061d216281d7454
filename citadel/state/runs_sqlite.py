"""SQLite runs (DESIGN.md §10): the embedded default, shared by the processes of one machine.

This module owns the tables of runs in the runs file (`CitadelConfig.runs_path`), opened through
`SQLiteFile` (citadel/state/sqlite_file.py: WAL, a busy timeout, `BEGIN IMMEDIATE` writes, every sqlite3
error as StateUnavailable); the conversation store shares the file.

A run's seq is assigned inside the append's write transaction from the last stored seq, and
UNIQUE (run_id, seq) backs that up, so two processes appending at once never share a seq and leave no
gap. Steps are `INSERT OR IGNORE` under UNIQUE (run_id, step_id): the first record wins. A lease is one
row (owner, expires_at) changed only by conditional statements judged by the injected clock. `wait`
wakes at once on an append by this process and polls the file for other processes' appends.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from citadel.state.runs import (MAX_EVENTS_PER_READ, MAX_ORPHANS, NOT_ADOPTABLE, Clock, EventType, Run, RunEvent,
                                RunStatus, bounded_limit, bounded_wait, encode_record, lease_ttl)
from citadel.state.sqlite_file import SQLiteFile

log = logging.getLogger(__name__)

# `wait` re-reads the file this often: short enough that a watcher sees an event within a frame.
WAIT_POLL_S = 0.025

# Adoptable means "not in NOT_ADOPTABLE" (neither finished nor waiting for an approval): the same text in
# the partial index and in the query, so SQLite can answer `orphans` from the index without scanning
# finished runs. (A file made before WAITING existed keeps its older index, which this query no longer
# matches: still correct, it scans.)
_UNFINISHED_SQL = "status NOT IN ({})".format(", ".join(f"'{s.value}'" for s in sorted(NOT_ADOPTABLE)))

_RUN_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        question TEXT NOT NULL,
        groups_json TEXT NOT NULL,
        status TEXT NOT NULL,
        path TEXT,
        stop_reason TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL)""",
    f"CREATE INDEX IF NOT EXISTS runs_unfinished ON runs (created_at) WHERE {_UNFINISHED_SQL}",
    """CREATE TABLE IF NOT EXISTS run_events (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        data_json TEXT NOT NULL,
        at REAL NOT NULL,
        UNIQUE (run_id, seq))""",
    """CREATE TABLE IF NOT EXISTS run_steps (
        run_id TEXT NOT NULL,
        step_id TEXT NOT NULL,
        result_json TEXT NOT NULL,
        at REAL NOT NULL,
        UNIQUE (run_id, step_id))""",
    # Leases and cancel flags are keyed by run id alone, like the in-process store's (no run required).
    """CREATE TABLE IF NOT EXISTS run_leases (
        run_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at REAL NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS run_cancels (run_id TEXT PRIMARY KEY)",
)

_RUN_COLUMNS = ("run_id, tenant_id, user_id, conversation_id, question, groups_json, status, path, "
                "stop_reason, created_at, updated_at")


class SQLiteRunStore:
    """Runs in a SQLite file, implementing `RunStore` (see citadel/state/runs.py for the contract)."""

    def __init__(self, path: str | Path, clock: Clock):
        self._now = clock
        self._file = SQLiteFile(path, _RUN_SCHEMA, "run store")
        # This process's appends wake its waiters at once; another process's reach them by polling.
        self._appended = threading.Condition()
        self._appends = 0

    def close(self) -> None:
        self._file.close()

    # ---------------------------------------------------------------------------------- run records
    def create(self, run: Run) -> Run:
        now = self._now()
        stored = replace(run, created_at=now, updated_at=now, status=RunStatus(run.status))
        with self._file.write() as db:
            inserted = db.execute(
                f"INSERT OR IGNORE INTO runs ({_RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                _run_row(stored),
            ).rowcount
            if not inserted:
                raise ValueError(f"run {run.run_id!r} exists")
        return stored

    def get(self, run_id: str) -> Run | None:
        rows = self._file.read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
        return _run(rows[0]) if rows else None

    def update(self, run_id: str, *, status: RunStatus | None = None, path: str | None = None,
               stop_reason: str | None = None) -> Run:
        status_text = None if status is None else RunStatus(status).value
        with self._file.write() as db:
            # COALESCE keeps a field the caller left as None, in the same statement that sets the rest.
            changed = db.execute(
                "UPDATE runs SET status = COALESCE(?, status), path = COALESCE(?, path), "
                "stop_reason = COALESCE(?, stop_reason), updated_at = ? WHERE run_id = ?",
                (status_text, path, stop_reason, self._now(), run_id),
            ).rowcount
            if not changed:
                raise KeyError(run_id)
            row = db.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return _run(row)

    # ----------------------------------------------------------------------------------- event log
    def append(self, run_id: str, type: EventType, data: dict[str, Any]) -> RunEvent:
        event_type, data_json = EventType(type), encode_record(data)
        with self._file.write() as db:
            # The write lock is held from BEGIN IMMEDIATE, so no other process can take the same seq
            # between this read and the insert; UNIQUE (run_id, seq) would refuse it anyway.
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
                raise KeyError(run_id)
            (last,) = db.execute("SELECT COALESCE(MAX(seq), 0) FROM run_events WHERE run_id = ?",
                                 (run_id,)).fetchone()
            event = RunEvent(run_id, last + 1, event_type, json.loads(data_json), self._now())
            db.execute("INSERT INTO run_events (run_id, seq, type, data_json, at) VALUES (?, ?, ?, ?, ?)",
                       (run_id, event.seq, event_type.value, data_json, event.at))
        with self._appended:
            self._appends += 1
            self._appended.notify_all()
        return event

    def events(self, run_id: str, after_seq: int = 0, limit: int = MAX_EVENTS_PER_READ) -> list[RunEvent]:
        count = bounded_limit(limit, MAX_EVENTS_PER_READ)
        if count == 0:
            return []
        rows = self._file.read(
            "SELECT seq, type, data_json, at FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_id, max(0, int(after_seq)), count),
        )
        return [RunEvent(run_id, seq, EventType(kind), json.loads(data), at) for seq, kind, data, at in rows]

    def wait(self, run_id: str, after_seq: int, timeout_s: float) -> list[RunEvent]:
        deadline = time.monotonic() + bounded_wait(timeout_s)
        while True:
            with self._appended:
                seen = self._appends
            found = self.events(run_id, after_seq)
            remaining = deadline - time.monotonic()
            if found or remaining <= 0:
                return found
            with self._appended:  # woken by an append here, or re-read after a poll interval
                if self._appends == seen:
                    self._appended.wait(min(WAIT_POLL_S, remaining))

    # --------------------------------------------------------------------------------------- steps
    def record_step(self, run_id: str, step_id: str, result: dict[str, Any]) -> dict[str, Any]:
        result_json = encode_record(result)
        with self._file.write() as db:
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
                raise KeyError(run_id)
            db.execute("INSERT OR IGNORE INTO run_steps (run_id, step_id, result_json, at) VALUES (?, ?, ?, ?)",
                       (run_id, step_id, result_json, self._now()))
            (stored,) = db.execute("SELECT result_json FROM run_steps WHERE run_id = ? AND step_id = ?",
                                   (run_id, step_id)).fetchone()
        return json.loads(stored)

    def steps(self, run_id: str) -> dict[str, dict[str, Any]]:
        rows = self._file.read("SELECT step_id, result_json FROM run_steps WHERE run_id = ? ORDER BY rowid",
                               (run_id,))
        return {step_id: json.loads(result) for step_id, result in rows}

    # -------------------------------------------------------------------------------------- leases
    def acquire(self, run_id: str, owner: str, ttl_s: float) -> bool:
        ttl, now = lease_ttl(ttl_s), self._now()
        with self._file.write() as db:
            # Insert, or take over only when the row is ours already or has expired: one statement.
            changed = db.execute(
                "INSERT INTO run_leases (run_id, owner, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at "
                "WHERE run_leases.owner = excluded.owner OR run_leases.expires_at <= ?",
                (run_id, owner, now + ttl, now),
            ).rowcount
        return changed == 1

    def renew(self, run_id: str, owner: str, ttl_s: float) -> bool:
        ttl = lease_ttl(ttl_s)
        with self._file.write() as db:
            changed = db.execute("UPDATE run_leases SET expires_at = ? WHERE run_id = ? AND owner = ?",
                                 (self._now() + ttl, run_id, owner)).rowcount
        return changed == 1

    def release(self, run_id: str, owner: str) -> None:
        with self._file.write() as db:
            db.execute("DELETE FROM run_leases WHERE run_id = ? AND owner = ?", (run_id, owner))

    def orphans(self, limit: int = 100) -> list[str]:
        count = bounded_limit(limit, MAX_ORPHANS)
        rows = self._file.read(
            f"SELECT r.run_id FROM runs r LEFT JOIN run_leases l ON l.run_id = r.run_id "
            f"WHERE r.{_UNFINISHED_SQL} AND (l.expires_at IS NULL OR l.expires_at <= ?) "
            f"ORDER BY r.created_at, r.rowid LIMIT ?",
            (self._now(), count),
        )
        return [run_id for (run_id,) in rows]

    # ------------------------------------------------------------------------------------- cancel
    def request_cancel(self, run_id: str) -> None:
        with self._file.write() as db:
            db.execute("INSERT OR IGNORE INTO run_cancels (run_id) VALUES (?)", (run_id,))

    def cancel_requested(self, run_id: str) -> bool:
        return bool(self._file.read("SELECT 1 FROM run_cancels WHERE run_id = ?", (run_id,)))

    # ------------------------------------------------------------------------------------ deletion
    def delete_user(self, tenant_id: str, user_id: str) -> int:
        with self._file.write() as db:
            owned = [run_id for (run_id,) in db.execute("SELECT run_id FROM runs WHERE tenant_id = ? AND user_id = ?",
                                                        (tenant_id, user_id))]
            for run_id in owned:
                _delete_run(db, run_id)
        self._file.checkpoint()
        return len(owned)

    def purge_idle(self, max_idle_s: float) -> int:
        cutoff = self._now() - max_idle_s
        with self._file.write() as db:
            idle = [run_id for (run_id,) in db.execute(_IDLE_RUNS, (cutoff, cutoff))]
            for run_id in idle:
                _delete_run(db, run_id)
        if idle:
            self._file.checkpoint()
        return len(idle)


# Runs last changed, and last given an event, before the cutoff.
_IDLE_RUNS = ("SELECT r.run_id FROM runs r WHERE r.updated_at < ? AND NOT EXISTS "
              "(SELECT 1 FROM run_events e WHERE e.run_id = r.run_id AND e.at >= ?)")


def _delete_run(db: sqlite3.Connection, run_id: str) -> None:
    """A run and everything recorded for it, inside the caller's write transaction."""
    for table in ("run_events", "run_steps", "run_leases", "run_cancels", "runs"):
        db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))


def _run_row(run: Run) -> tuple:
    return (run.run_id, run.tenant_id, run.user_id, run.conversation_id, run.question,
            json.dumps(list(run.groups)), RunStatus(run.status).value, run.path, run.stop_reason,
            run.created_at, run.updated_at)


def _run(row: tuple) -> Run:
    (run_id, tenant_id, user_id, conversation_id, question, groups_json, status, path, stop_reason,
     created_at, updated_at) = row
    return Run(run_id, tenant_id, user_id, conversation_id, question, tuple(json.loads(groups_json)),
               RunStatus(status), path, stop_reason, created_at, updated_at)
