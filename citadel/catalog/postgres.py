"""Postgres implementation of the Catalog: the one several nodes share (DESIGN.md §7).

The statements are citadel/catalog/sql.py's, shared with the SQLite reference (citadel/catalog/sqlite.py),
and held by the same conformance suite (tests/conformance/test_catalog_backends.py). This module keeps:
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
- Postgres's dialect: `%s` placeholders, arrays for list parameters and list columns, jsonpath for
  the JSON conditions.
Queries are parameterised; the only SQL text ever built is fixed.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from citadel.catalog.migrations import apply_migrations
from citadel.catalog.sql import SQLCatalog, Tx, unavailable_on_error

# The first key of the two-key advisory locks that serialise one tenant's document writes
# (the second is the tenant id's hash); distinct from the migration lock's single key.
_TENANT_WRITE_LOCK = 0x63_74_64_6C  # "ctdl"

log = logging.getLogger(__name__)


class PostgresDialect:
    driver_error = psycopg.Error

    def sql(self, statement: str) -> str:
        return _percent_placeholders(statement)

    def in_list(self, column: str, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        return f"{column} = ANY(?)", (list(values),)

    def array_of(self, column: str, from_where: str) -> str:
        return f"ARRAY(SELECT {column} {from_where})"

    def array_values(self, value: Any) -> list[Any]:
        return list(value)

    def json_array_cites(self, column: str, array: str) -> str:
        return (f"jsonb_path_exists({column}::jsonb, '$.{array}[*] ? (@.document_id == $doc)',"
                " jsonb_build_object('doc', CAST(? AS TEXT)))")

    def lock_tenant(self, tx: Tx, tenant_id: str) -> None:
        tx.execute("SELECT pg_advisory_xact_lock(?, hashtext(?))", (_TENANT_WRITE_LOCK, tenant_id))


class PostgresCatalog(SQLCatalog):
    dialect = PostgresDialect()

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 10, timeout_s: float = 5.0,
                 connect_timeout_s: int = 5, application_name: str = "citadel-catalog"):
        """`dsn`: a libpq URL or conninfo (postgresql://user@host:port/db). `min_size`/`max_size`: the
        pool's bounds; `timeout_s`: how long a call waits for a pooled connection before it fails as
        CatalogUnavailable. Applies the pending migrations before it returns."""
        if min_size < 0 or max_size < max(min_size, 1):
            raise ValueError(f"pool sizes must satisfy 0 <= min_size <= max_size, max_size >= 1 "
                             f"(got {min_size}, {max_size})")
        connect_kwargs = {"connect_timeout": connect_timeout_s, "application_name": application_name}
        with unavailable_on_error("migrate", psycopg.Error):
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
    def _tx(self) -> Iterator[Tx]:
        """Committed when the block ends, rolled back if it raises."""
        with unavailable_on_error("write", psycopg.Error), self._pool.connection() as conn:
            with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
                yield Tx(cur, self.dialect)

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with unavailable_on_error("read", psycopg.Error), self._pool.connection() as conn:
            with conn.cursor(row_factory=dict_row) as cur:
                return Tx(cur, self.dialect).execute(sql, args).fetchall()


def _percent_placeholders(statement: str) -> str:
    """`?` → `%s` outside quoted literals (a jsonpath's `?` filter stays as it is)."""
    parts = statement.split("'")
    parts[::2] = [part.replace("?", "%s") for part in parts[::2]]
    return "'".join(parts)
