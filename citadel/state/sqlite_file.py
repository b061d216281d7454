"""The SQLite file every state store of one machine opens (runs, conversations, approvals, pauses).

It owns how a state file is opened (WAL, a busy timeout, secure delete), how a write transaction is
taken (`BEGIN IMMEDIATE`, so two processes queue for the write lock instead of failing half way), and
how every sqlite3 error leaves (as StateUnavailable, its text in the log only). Each store brings its
own schema.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from citadel.state.base import StateUnavailable

log = logging.getLogger(__name__)

# How long a statement waits for another process's write lock before the store reports unavailable.
BUSY_TIMEOUT_MS = 5_000


@contextmanager
def sqlite_guard(what: str) -> Iterator[None]:
    """A database error inside the block becomes StateUnavailable; its text stays in the log."""
    try:
        yield
    except sqlite3.Error as error:
        log.warning("%s failed: %s: %s", what, type(error).__name__, error)
        raise StateUnavailable(f"the {what} is unavailable; try again shortly") from None


class SQLiteFile:
    """One connection to a state file, shared by this process's threads under a lock.

    Other processes open their own; WAL lets them read while one writes, and the busy timeout makes
    a writer wait for the lock rather than fail. The schema is created on open, idempotently.
    """

    def __init__(self, path: str | Path, schema: Sequence[str], what: str):
        self.path, self.what = Path(path), what
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            log.warning("%s: cannot create %s: %s", what, self.path.parent, error)
            raise StateUnavailable(f"the {what} is unavailable; try again shortly") from None
        with sqlite_guard(what):
            self._conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000,
                                         isolation_level=None, check_same_thread=False)
        try:
            with sqlite_guard(what):
                self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                self._conn.execute("PRAGMA journal_mode=WAL")
                # WAL with NORMAL survives a process crash (what adoption is for); only power loss
                # can lose the last commits.
                self._conn.execute("PRAGMA synchronous=NORMAL")
                # Deleted conversations and runs are overwritten, not left readable in free pages.
                self._conn.execute("PRAGMA secure_delete=ON")
            with self.write() as db:
                for statement in schema:
                    db.execute(statement)
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        with self._lock, sqlite_guard(self.what):
            self._conn.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One atomic write transaction, the write lock taken up front: all of it or none of it."""
        with self._lock, sqlite_guard(self.what):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                # Left open, the transaction would refuse every later BEGIN; SQLite may have rolled it
                # back already (a full disk, say).
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def read(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock, sqlite_guard(self.what):
            return self._conn.execute(sql, args).fetchall()

    def checkpoint(self) -> None:
        """After a deletion: copy the WAL into the file and empty it (the WAL still holds the deleted
        rows' old pages). Best effort: another process's open read keeps it from finishing, and the
        next checkpoint overwrites those frames anyway."""
        with self._lock, sqlite_guard(self.what):
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
