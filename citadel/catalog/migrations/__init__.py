"""The Postgres catalog's schema migrations, and the small runner that applies them.

Each `NNNN_name.sql` file here is one migration, applied in version order, in its own transaction,
and recorded in `schema_migrations` (version, name, applied_at). The runner holds a session-level
Postgres advisory lock while it reads and applies them, so processes that start at once (several
nodes, several replicas) apply each migration exactly once: the first applies, the others wait on
the lock and then find nothing left to do. Re-running is a no-op. A migration is never edited once
released; a change is a new file.

They are the schema of both backends: SQLite applies the same files, translated into its spelling
(citadel/catalog/sqlite.py, `sqlite_schema`), so a new migration must be one that translation carries
(it refuses one that it does not, at the SQLite catalog's first open).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

# The advisory lock key every Citadel migrator takes (an arbitrary constant: "citadel" in ASCII).
MIGRATION_LOCK_KEY = 0x63_69_74_61_64_65_6C
_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """Every migration shipped in this package, in version order (versions are unique)."""
    found: list[Migration] = []
    for entry in resources.files(__name__).iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate catalog migration versions: {versions}")
    return found


def apply_migrations(conn: psycopg.Connection) -> list[int]:
    """Apply the pending migrations on this connection; returns the versions applied now.

    Safe to call from many processes at once (the advisory lock) and to call again (idempotent).
    The connection is left in autocommit mode; errors leave as the driver raises them (the caller
    maps them)."""
    conn.autocommit = True
    conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
    try:
        conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version    INTEGER PRIMARY KEY,
                   name       TEXT NOT NULL,
                   applied_at DOUBLE PRECISION NOT NULL)"""
        )
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations").fetchall()}
        applied: list[int] = []
        for migration in migrations():
            if migration.version in done:
                continue
            with conn.transaction():
                conn.execute(migration.sql.encode())  # no parameters: one simple-protocol script
                conn.execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                             (migration.version, migration.name, time.time()))
            applied.append(migration.version)
        return applied
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
