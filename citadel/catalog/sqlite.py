"""SQLite implementation of the Catalog (the embedded default).

The statements are citadel/catalog/sql.py's, shared with Postgres; this module keeps the connection
(one, behind a lock; every write a `BEGIN IMMEDIATE` transaction, which also serialises writers per
tenant), SQLite's dialect, the schema, the migration of the first answer-log layout, and the scrubbing
of deleted text. The schema is the Postgres migrations' (citadel/catalog/migrations/), translated
line by line into SQLite's spelling of the same columns and rules (`sqlite_schema`), so the tables are
declared once for both backends. Every database error leaves as `CatalogUnavailable` (the Catalog protocol's one failure), with
the SQLite message and path in the server log only: callers fail closed without importing sqlite3.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from citadel.catalog.base import SENSITIVE_DATA_REASON, WITHHELD_QUESTION
from citadel.catalog.migrations import Migration, migrations
from citadel.catalog.sql import SQLCatalog, Tx, unavailable_on_error

# The first answer-log layout (keyed by the client's request id), renamed while it is migrated.
_FIRST_ANSWER_LOG = "answer_log_v1"
# Postgres's spelling of a column in the migrations, and SQLite's for the same affinity and rule.
_SQLITE_TYPES = (("BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "INTEGER PRIMARY KEY AUTOINCREMENT"),
                 ("BOOLEAN NOT NULL DEFAULT FALSE", "INTEGER NOT NULL DEFAULT 0"),
                 ("DOUBLE PRECISION", "REAL"), ("BYTEA", "BLOB"))
# The migrations' append-only rule: a Postgres trigger function, and the line that applies it.
_APPEND_ONLY_FUNCTION = "CREATE FUNCTION citadel_append_only()"
_APPEND_ONLY_TRIGGER = "FOR EACH ROW EXECUTE FUNCTION citadel_append_only();"
# What the translation cannot carry to SQLite: Postgres syntax it does not rewrite, and statements that
# are not idempotent (SQLite applies the whole schema on every open, with IF NOT EXISTS).
_UNTRANSLATED = ("$$", "GENERATED", "BYTEA", "BOOLEAN", "DOUBLE PRECISION", "EXECUTE FUNCTION", "ALTER ", "DROP ",
                 "INSERT ", "UPDATE ", "DELETE ")


class SQLiteDialect:
    driver_error = sqlite3.Error

    def sql(self, statement: str) -> str:
        return statement  # sqlite3's placeholder style is `?` already

    def in_list(self, column: str, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        # An empty list reads `IN (NULL)`: true for no row.
        return f"{column} IN ({','.join('?' * len(values)) or 'NULL'})", tuple(values)

    def array_of(self, column: str, from_where: str) -> str:
        return f"(SELECT json_group_array({column}) {from_where})"

    def array_values(self, value: Any) -> list[Any]:
        return json.loads(value)

    def json_array_cites(self, column: str, array: str) -> str:
        return (f"(json_valid({column}) AND EXISTS (SELECT 1 FROM json_each({column}, '$.{array}') AS item"
                " WHERE json_extract(item.value, '$.document_id') = ?))")

    def lock_tenant(self, tx: Tx, tenant_id: str) -> None:
        """Nothing to take: every write transaction is BEGIN IMMEDIATE, one writer at a time."""


class SQLiteCatalog(SQLCatalog):
    dialect = SQLiteDialect()

    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.row_factory = _dict_row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute("PRAGMA busy_timeout=5000")
        # Deleted rows are overwritten with zeros, not left in free pages: a withdrawal's deleted
        # answers must not be recoverable from the file (citadel/ingest/withdrawal.py).
        self._conn.execute("PRAGMA secure_delete=ON")
        _set_aside_first_answer_log(self._conn)
        self._conn.executescript(sqlite_schema())
        self._move_first_answer_log()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[Tx]:
        with self._lock:
            with unavailable_on_error("write", sqlite3.Error):
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield Tx(self._conn, self.dialect)
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._lock, unavailable_on_error("read", sqlite3.Error):
            return _fetch_all(self._conn, sql, tuple(args))

    def _scrub_deleted(self) -> None:
        """Copy the WAL into the database and empty it: the WAL still holds the pages as they were
        before the delete. Best effort: a reader of another process may keep it from finishing, and
        the next checkpoint overwrites those frames anyway."""
        with self._lock, unavailable_on_error("checkpoint", sqlite3.Error):
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _move_first_answer_log(self) -> None:
        """Finish the migration `_set_aside_first_answer_log` began: copy the old rows into the
        append-only table (withholding any question that was refused as sensitive data, which the
        first layout stored verbatim) and drop the old table, in one transaction. Safe to re-run."""
        with self._tx() as tx:
            if not _table_columns(self._conn, _FIRST_ANSWER_LOG):
                return
            tx.execute(
                f"""INSERT INTO answer_log (request_id, correlation_id, ts, tenant_id, user_id, question, response)
                    SELECT request_id, NULL, ts, tenant_id, user_id,
                           CASE WHEN json_valid(response) AND json_extract(response, '$.reason') = ?
                                THEN ? ELSE question END,
                           response
                    FROM {_FIRST_ANSWER_LOG} ORDER BY ts""",
                (SENSITIVE_DATA_REASON, WITHHELD_QUESTION),
            )
            tx.execute(f"DROP TABLE {_FIRST_ANSWER_LOG}")


def sqlite_schema(shipped: Sequence[Migration] | None = None) -> str:
    """Every migration's (`shipped`: those in citadel/catalog/migrations/) tables, indexes and append-only triggers in SQLite's spelling, each statement
    `IF NOT EXISTS` (applied on every open). Raises for a migration it cannot translate, so a new one
    that needs more than this is noticed at once rather than skipped on SQLite."""
    lines: list[str] = []
    for migration in migrations() if shipped is None else shipped:
        in_function, trigger_table = False, ""
        for line in migration.sql.splitlines():
            if line.startswith(_APPEND_ONLY_FUNCTION):
                in_function = True
            if in_function:  # SQLite's triggers raise themselves: the function body is dropped
                in_function = line != "$$;"
                continue
            if line.startswith("--"):
                continue
            if line.startswith(("CREATE TABLE ", "CREATE INDEX ", "CREATE TRIGGER ")):
                words = line.split(" ")
                line = " ".join([*words[:2], "IF NOT EXISTS", *words[2:]])
                trigger_table = words[-1] if words[1] == "TRIGGER" else ""
            elif line.strip() == _APPEND_ONLY_TRIGGER and trigger_table:
                line = f"BEGIN SELECT RAISE(ABORT, '{trigger_table} is append-only'); END;"
            for postgres, sqlite in _SQLITE_TYPES:
                line = line.replace(postgres, sqlite)
            lines.append(line)
    script = "\n".join(lines) + "\n"
    statements = script.replace("BEFORE UPDATE ON", "").replace("BEFORE DELETE ON", "")
    untranslated = [word for word in _UNTRANSLATED if word in statements]
    if untranslated:
        raise RuntimeError(f"catalog migrations SQLite cannot apply as they are: {untranslated}")
    return script


def _dict_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.description, row)}


def _table_columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row["name"] for row in db.execute(f"PRAGMA table_info({table})")}


def _set_aside_first_answer_log(db: sqlite3.Connection) -> None:
    """A catalog from before the append-only answer log keyed its rows by the client's request id:
    rename that table out of the way so the schema creates the new one (one atomic statement; the
    rows move in `_move_first_answer_log`)."""
    columns = _table_columns(db, "answer_log")
    if columns and "id" not in columns:
        db.execute(f"ALTER TABLE answer_log RENAME TO {_FIRST_ANSWER_LOG}")


def _fetch_all(conn: sqlite3.Connection, sql: str, args: tuple) -> list[dict[str, Any]]:
    return conn.execute(sql, args).fetchall()
