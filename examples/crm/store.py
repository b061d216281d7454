"""The CRM's own SQLite database: accounts, discount approvals and notes.

Writes that a tool may repeat (a retried call, a run resumed after a crash) carry an `external_id`,
unique per tenant. Idempotency rests on that UNIQUE constraint, not on a read-then-write check: the
insert is `ON CONFLICT DO NOTHING`, then the row holding the key is read back, so any number of
concurrent callers, in this process or another, leave exactly one record per key.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import yaml

SEED_FILE = Path(__file__).with_name("seed.yaml")
BUSY_TIMEOUT_MS = 5_000  # another process holding the write lock is waited for, not an error

SCHEMA = """
CREATE TABLE IF NOT EXISTS accounts (
    tenant_id TEXT NOT NULL,
    account_id TEXT NOT NULL,
    name TEXT NOT NULL,
    region TEXT NOT NULL,
    annual_revenue INTEGER NOT NULL,
    customer_since TEXT NOT NULL,          -- ISO date the customer's master services agreement started
    owner_group TEXT NOT NULL,             -- the group that may write to the account
    PRIMARY KEY (tenant_id, account_id)
);
CREATE TABLE IF NOT EXISTS discount_approvals (
    approval_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    account_id TEXT NOT NULL,
    discount_pct REAL NOT NULL,
    term_months INTEGER NOT NULL,
    requested_by TEXT NOT NULL,
    status TEXT NOT NULL,
    external_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (tenant_id, external_id),
    FOREIGN KEY (tenant_id, account_id) REFERENCES accounts (tenant_id, account_id)
);
CREATE INDEX IF NOT EXISTS discount_approvals_by_account ON discount_approvals (tenant_id, account_id);
CREATE TABLE IF NOT EXISTS notes (
    note_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    account_id TEXT NOT NULL,
    text TEXT NOT NULL,
    author TEXT NOT NULL,
    external_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (tenant_id, external_id),
    FOREIGN KEY (tenant_id, account_id) REFERENCES accounts (tenant_id, account_id)
);
"""

# The status a record gets here: Citadel calls the CRM only after its own policy (and, for T2, a
# person) has approved, so the CRM records a decision already taken.
APPROVED = "approved"


@dataclass(frozen=True)
class Account:
    tenant_id: str
    account_id: str
    name: str
    region: str
    annual_revenue: int
    customer_since: str
    owner_group: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DiscountApproval:
    approval_id: str
    tenant_id: str
    account_id: str
    discount_pct: float
    term_months: int
    requested_by: str
    status: str
    external_id: str
    created_at: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Note:
    note_id: str
    tenant_id: str
    account_id: str
    text: str
    author: str
    external_id: str
    created_at: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class CrmStore:
    """One connection per process, shared by the server's worker threads under a lock (sqlite3
    connections are not safe to use from two threads at once); WAL lets readers in other processes
    run beside the writer."""

    def __init__(self, path: Path, seed_file: Path = SEED_FILE, clock: Callable[[], str] = _utc_now):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._clock = clock
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA foreign_keys = ON")
            self._db.executescript(SCHEMA)
        self._seed(seed_file)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _seed(self, seed_file: Path) -> None:
        """Seed accounts are added when missing and never overwritten (INSERT OR IGNORE: two
        processes opening a fresh database at once agree)."""
        accounts = (yaml.safe_load(seed_file.read_text()) or {}).get("accounts", [])
        rows = [Account(**{**a, "customer_since": str(a["customer_since"])}) for a in accounts]
        with self._lock:
            self._db.executemany(
                "INSERT OR IGNORE INTO accounts VALUES (:tenant_id, :account_id, :name, :region, :annual_revenue,"
                " :customer_since, :owner_group)", [r.to_dict() for r in rows])

    # ------------------------------------------------------------------------- accounts

    def get_account(self, tenant_id: str, account_id: str) -> Account | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM accounts WHERE tenant_id = ? AND account_id = ?",
                                   (tenant_id, account_id)).fetchone()
        return Account(**dict(row)) if row else None

    # ------------------------------------------------------------------------- discount approvals

    def create_discount_approval(self, tenant_id: str, account_id: str, discount_pct: float, term_months: int,
                                 requested_by: str, external_id: str) -> tuple[DiscountApproval, bool]:
        """The approval holding `external_id`, and whether this call created it. A known key returns
        the existing record unchanged, whatever the other arguments say."""
        approval_id = "apr_" + secrets.token_hex(8)
        with self._lock:
            cursor = self._db.execute(
                "INSERT INTO discount_approvals (approval_id, tenant_id, account_id, discount_pct, term_months,"
                " requested_by, status, external_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (tenant_id, external_id) DO NOTHING",
                (approval_id, tenant_id, account_id, float(discount_pct), int(term_months), requested_by, APPROVED,
                 external_id, self._clock()))
            created = cursor.rowcount == 1
            row = self._db.execute("SELECT * FROM discount_approvals WHERE tenant_id = ? AND external_id = ?",
                                   (tenant_id, external_id)).fetchone()
        return DiscountApproval(**dict(row)), created

    def find_approval_by_external_id(self, tenant_id: str, external_id: str) -> DiscountApproval | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM discount_approvals WHERE tenant_id = ? AND external_id = ?",
                                   (tenant_id, external_id)).fetchone()
        return DiscountApproval(**dict(row)) if row else None

    def list_approvals(self, tenant_id: str, account_id: str) -> list[DiscountApproval]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM discount_approvals WHERE tenant_id = ? AND account_id = ?"
                                    " ORDER BY created_at, approval_id", (tenant_id, account_id)).fetchall()
        return [DiscountApproval(**dict(r)) for r in rows]

    # ------------------------------------------------------------------------- notes

    def add_note(self, tenant_id: str, account_id: str, text: str, author: str,
                 external_id: str) -> tuple[Note, bool]:
        """Like `create_discount_approval`: one note per `external_id`, returned unchanged on a repeat."""
        note_id = "note_" + secrets.token_hex(8)
        with self._lock:
            cursor = self._db.execute(
                "INSERT INTO notes (note_id, tenant_id, account_id, text, author, external_id, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, external_id) DO NOTHING",
                (note_id, tenant_id, account_id, text, author, external_id, self._clock()))
            created = cursor.rowcount == 1
            row = self._db.execute("SELECT * FROM notes WHERE tenant_id = ? AND external_id = ?",
                                   (tenant_id, external_id)).fetchone()
        return Note(**dict(row)), created

    def list_notes(self, tenant_id: str, account_id: str) -> list[Note]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM notes WHERE tenant_id = ? AND account_id = ?"
                                    " ORDER BY created_at, note_id", (tenant_id, account_id)).fetchall()
        return [Note(**dict(r)) for r in rows]

    # ------------------------------------------------------------------------- for tests and checks

    def count_approvals(self, tenant_id: str | None = None, external_id: str | None = None) -> int:
        return self._count("discount_approvals", tenant_id, external_id)

    def count_notes(self, tenant_id: str | None = None, external_id: str | None = None) -> int:
        return self._count("notes", tenant_id, external_id)

    def _count(self, table: str, tenant_id: str | None, external_id: str | None) -> int:
        clauses, params = [], []
        for column, value in (("tenant_id", tenant_id), ("external_id", external_id)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._lock:  # `table` is one of two literals above, never caller input
            return self._db.execute(f"SELECT COUNT(*) FROM {table}{where}", params).fetchone()[0]
