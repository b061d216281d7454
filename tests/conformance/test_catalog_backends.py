"""Every Catalog backend runs the catalog suite (tests/conformance/suites/catalog.py): SQLite, on a
file and in memory, Postgres, each test on a fresh database of a private server
(tests/postgres_server.py; skipped without the binaries unless CITADEL_REQUIRE_POSTGRES=1), and
GuardedCatalog (a serving process's catalog: its query-path reads behind the catalog breaker) around
SQLite. Postgres-only tests follow: migrations, concurrency, the server going away.

There is no FakeCatalog: SQLite in a temporary directory is the fake (it is fast, needs no server
and is the embedded default).
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from citadel.catalog.base import Catalog
from citadel.errors import CatalogUnavailable
from tests.conformance.suites.catalog import (ROLES, STAFF, T1, T2, CatalogConformance, GuardedSQLiteBackend,
                                             PostgresBackend, SQLiteFileBackend, SQLiteMemoryBackend, stage)
from tests.postgres_server import fresh_database, postgres_dsn  # noqa: F401  (a session fixture)


class TestSQLiteFileCatalog(SQLiteFileBackend, CatalogConformance):
    pass


class TestSQLiteMemoryCatalog(SQLiteMemoryBackend, CatalogConformance):
    pass


class TestPostgresCatalog(PostgresBackend, CatalogConformance):
    pass


class TestGuardedCatalog(GuardedSQLiteBackend, CatalogConformance):
    pass


def _methods(protocol: type) -> set[str]:
    """The public methods a protocol declares itself (not those it inherits)."""
    return {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}


def test_the_roles_split_the_catalog_without_overlap():
    """Catalog is exactly its roles' union and close: no method in two roles, none outside a role."""
    owned = [name for role in ROLES for name in _methods(role)]
    assert len(owned) == len(set(owned))
    every = {name for name in dir(Catalog) if not name.startswith("_") and callable(getattr(Catalog, name))}
    assert every == set(owned) | {"close"} and _methods(Catalog) == {"close"}


# -- Postgres only: migrations, concurrency, the server going away -----------------------------


@pytest.fixture
def postgres_database(postgres_dsn):
    dsn, drop = fresh_database(postgres_dsn)
    yield dsn
    drop()


def _applied_versions(dsn: str) -> list[int]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return [row[0] for row in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def test_migrations_racing_each_other_are_applied_once(postgres_database):
    import psycopg

    from citadel.catalog.migrations import apply_migrations, migrations

    racers = 4
    barrier = threading.Barrier(racers)

    def race() -> list[int]:
        with psycopg.connect(postgres_database) as conn:
            barrier.wait(timeout=10)
            return apply_migrations(conn)

    with ThreadPoolExecutor(racers) as pool:
        results = [f.result(timeout=60) for f in [pool.submit(race) for _ in range(racers)]]
    expected = [m.version for m in migrations()]
    assert expected and expected[0] == 1
    assert sorted(results, key=len) == [[]] * (racers - 1) + [expected], "one racer applies, the others wait"
    assert _applied_versions(postgres_database) == expected, "each migration recorded exactly once"
    with psycopg.connect(postgres_database) as conn:
        assert apply_migrations(conn) == [], "re-running is a no-op"


def test_catalogs_opening_at_once_share_one_schema(postgres_database):
    from citadel.catalog.postgres import PostgresCatalog

    with ThreadPoolExecutor(3) as pool:
        catalogs = list(pool.map(lambda _: PostgresCatalog(postgres_database, min_size=0, max_size=2), range(3)))
    try:
        catalogs[0].ensure_tenant(T1)
        catalogs[1].publish(T1, "seg-1", "tiny", [stage("travel", 1)], "job-1")
        assert set(catalogs[2].readable_documents(STAFF)) == {"travel"}, "one database, every node sees it"
    finally:
        for built in catalogs:
            built.close()
    from citadel.catalog.migrations import migrations

    assert _applied_versions(postgres_database) == [m.version for m in migrations()], "each applied once"


def test_concurrent_writes_to_one_tenant_are_serialised(postgres_database):
    from citadel.catalog.postgres import PostgresCatalog

    built = PostgresCatalog(postgres_database, min_size=1, max_size=6)
    try:
        built.ensure_tenant(T1)
        built.publish(T1, "seg-0", "tiny", [stage("travel", 1)], "job-0")
        writers = 6

        def write(i: int) -> None:
            built.publish(T1, f"seg-{i + 1}", "tiny", [stage(f"doc-{i}", 1)], f"job-{i + 1}")
            built.set_acl(T1, "travel", ["staff", f"group-{i}"], actor="admin")

        with ThreadPoolExecutor(writers) as pool:
            list(pool.map(write, range(writers)))
        [row] = [r for r in built.list_tenants() if r["tenant_id"] == T1]
        assert row["generation"] == writers + 1 and row["published_documents"] == writers + 1
        assert built.get_document(T1, "travel").acl_version == 1 + writers
    finally:
        built.close()


def test_the_audit_log_is_append_only_in_postgres(postgres_database):
    import psycopg

    from citadel.catalog.postgres import PostgresCatalog

    built = PostgresCatalog(postgres_database)
    try:
        built.audit("admin", "credential_add", T1, "app-1", {})
        built.log_answer("req-1", T1, "alice", "q", {})
    finally:
        built.close()
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        for statement in ("UPDATE audit_log SET actor = 'mallory'", "DELETE FROM audit_log",
                          "UPDATE answer_log SET question = 'edited'"):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                conn.execute(statement)


def test_an_unreachable_server_is_catalog_unavailable():
    pytest.importorskip("psycopg")
    from citadel.catalog.postgres import PostgresCatalog

    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(CatalogUnavailable):
        PostgresCatalog(f"postgresql://citadel@127.0.0.1:{port}/citadel", connect_timeout_s=2)


def test_the_wiring_builds_the_configured_backend(postgres_database, tmp_path):
    from citadel.catalog.postgres import PostgresCatalog
    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.config import load_config
    from citadel.wiring import Wiring

    default = Wiring(load_config(environ={"CITADEL_ANSWER__CONFIRM": "false", "CITADEL_HOME": str(tmp_path)}))
    assert isinstance(default.raw_catalog, SQLiteCatalog), "SQLite stays the default"
    default.raw_catalog.close()
    shared = Wiring(load_config(environ={
        "CITADEL_HOME": str(tmp_path), "CITADEL_CATALOG__BACKEND": "postgres",
        "CITADEL_CATALOG__DSN": postgres_database, "CITADEL_CATALOG__POOL_MAX_SIZE": "3"}))
    try:
        assert isinstance(shared.raw_catalog, PostgresCatalog)
        shared.catalog.ensure_tenant(T1)
        assert [row["tenant_id"] for row in shared.catalog.list_tenants()] == [T1]
    finally:
        shared.raw_catalog.close()


def test_a_database_gone_under_a_live_catalog_fails_closed(postgres_dsn):
    from citadel.catalog.postgres import PostgresCatalog

    dsn, drop = fresh_database(postgres_dsn)
    built = PostgresCatalog(dsn, min_size=1, max_size=2, timeout_s=1.0, connect_timeout_s=1)
    try:
        built.ensure_tenant(T1)
        drop()  # terminates the pooled connections; reconnecting finds no database
        started = time.monotonic()
        with pytest.raises(CatalogUnavailable):
            built.readable_documents(STAFF)
        with pytest.raises(CatalogUnavailable):
            built.ensure_tenant(T2)
        assert time.monotonic() - started < 10, "bounded by the pool timeout"
    finally:
        built.close()
