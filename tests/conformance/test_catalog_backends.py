"""One suite every Catalog backend passes (DESIGN.md §3, §7): SQLite, on a file and in memory, and
Postgres, each test on a fresh database of a private server (tests/postgres_server.py; skipped
without the binaries unless CITADEL_REQUIRE_POSTGRES=1).

There is no FakeCatalog: SQLite in a temporary directory is the fake (it is fast, needs no server
and is the embedded default).

What callers rely on: the Catalog protocol (the live permission check above all: only published,
current, ACL-permitted documents of the principal's own tenant are readable, and an ACL change or a
withdrawal is effective on the next read), monotonic versions with idempotent re-ingestion, the
atomic publish, jobs, dead letters and the append-only logs read back through CatalogAudit, and the
one failure type: any database error leaves as CatalogUnavailable.
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import pytest

from citadel.catalog.base import (AnswerLog, AuditLog, CandidateQueue, Catalog, CatalogAudit, JobLog, LatestVersion,
                                  PermissionSource, Publisher, StagedVersion)
from citadel.errors import CatalogUnavailable, CitadelError, InvalidTenant, NotFound
from citadel.types import DocumentMeta, Principal, content_hash, make_chunk_id
from tests.postgres_server import fresh_database, postgres_dsn  # noqa: F401  (a session fixture)

T1, T2 = "acme", "globex"
STAFF = Principal(T1, "alice", frozenset({"staff"}))
EXEC = Principal(T1, "bob", frozenset({"exec"}))
NOBODY = Principal(T1, "carol", frozenset())
OTHER_TENANT_STAFF = Principal(T2, "dave", frozenset({"staff"}))


def _sqlite_file(request: pytest.FixtureRequest, tmp: Path):
    from citadel.catalog.sqlite import SQLiteCatalog

    return SQLiteCatalog(tmp / "catalog.sqlite")


def _sqlite_memory(request: pytest.FixtureRequest, tmp: Path):
    from citadel.catalog.sqlite import SQLiteCatalog

    return SQLiteCatalog(":memory:")


def _postgres(request: pytest.FixtureRequest, tmp: Path):
    """A catalog on a fresh database (dropped after the test, once the catalog is closed)."""
    dsn, drop = fresh_database(request.getfixturevalue("postgres_dsn"))
    request.addfinalizer(drop)
    from citadel.catalog.postgres import PostgresCatalog

    return PostgresCatalog(dsn, min_size=1, max_size=4)


# name -> a function building an empty catalog (in a fresh temporary directory or database)
BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], Catalog]] = {
    "sqlite": _sqlite_file,
    "sqlite-memory": _sqlite_memory,
    "postgres": _postgres,
}


@pytest.fixture(params=list(BACKENDS))
def catalog(request, tmp_path):
    built = BACKENDS[request.param](request, tmp_path)
    built.ensure_tenant(T1)
    built.ensure_tenant(T2)
    yield built
    built.close()


def stage(doc: str, version: int, groups=("staff",), *, tenant: str = T1, visibility: str = "groups",
          supersedes: str | None = None, body: str = "") -> StagedVersion:
    meta = DocumentMeta(tenant, doc, title=f"Title of {doc}", source=f"/docs/{doc}.md", owner="owner@acme",
                        visibility=visibility, supersedes=supersedes, groups=tuple(groups))
    chunk_ids = tuple(make_chunk_id(tenant, doc, version, i) for i in range(3))
    return StagedVersion(meta, version, content_hash(f"{doc}:{body or version}"), chunk_ids,
                         tuple(content_hash(c) for c in chunk_ids))


ROLES = (PermissionSource, Publisher, JobLog, AuditLog, AnswerLog, CandidateQueue)


def test_implements_protocols(catalog):
    assert isinstance(catalog, Catalog) and isinstance(catalog, CatalogAudit)
    assert [role.__name__ for role in ROLES if not isinstance(catalog, role)] == []


def _methods(protocol: type) -> set[str]:
    """The public methods a protocol declares itself (not those it inherits)."""
    return {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}


def test_the_roles_split_the_catalog_without_overlap():
    """Catalog is exactly its roles' union and close: no method in two roles, none outside a role."""
    owned = [name for role in ROLES for name in _methods(role)]
    assert len(owned) == len(set(owned))
    every = {name for name in dir(Catalog) if not name.startswith("_") and callable(getattr(Catalog, name))}
    assert every == set(owned) | {"close"} and _methods(Catalog) == {"close"}


# -- tenants ----------------------------------------------------------------------------------


def test_tenants_are_created_once_and_listed_in_order(catalog):
    catalog.ensure_tenant(T1)  # idempotent
    catalog.publish(T1, "seg-1", "tiny", [stage("travel", 1)], "job-1")
    rows = {row["tenant_id"]: row for row in catalog.list_tenants()}
    assert list(rows) == sorted([T1, T2])
    assert rows[T1]["segment_id"] == "seg-1" and rows[T1]["published_documents"] == 1
    assert rows[T1]["published_chunks"] == 3
    assert rows[T2]["segment_id"] is None and rows[T2]["published_documents"] == 0


@pytest.mark.parametrize("bad", ["", "Acme", "../etc", "a:b", "a b", "ácme", "a" * 64])
def test_a_tenant_id_that_is_not_a_plain_name_is_refused(catalog, bad):
    with pytest.raises(InvalidTenant):
        catalog.ensure_tenant(bad)


# -- publishing and the live permission check -------------------------------------------------


def test_publish_switches_the_pointer_and_records_the_documents(catalog):
    assert catalog.published_segment(T1) is None
    catalog.publish(T1, "seg-1", "tiny", [stage("travel", 1), stage("board", 1, groups=("exec",))], "job-1")
    assert catalog.published_segment(T1) == "seg-1" and catalog.published_segment(T2) is None
    record = catalog.get_document(T1, "travel")
    assert (record.tenant_id, record.document_id, record.title, record.source) == (
        T1, "travel", "Title of travel", "/docs/travel.md")
    assert (record.status, record.published_version, record.latest_version) == ("published", 1, 1)
    assert record.groups == ("staff",)
    assert [d.document_id for d in catalog.list_documents(T1)] == ["board", "travel"]
    assert catalog.list_documents(T2) == [] and catalog.get_document(T2, "travel") is None
    assert catalog.manifest(T1, "travel", 1) == sorted(stage("travel", 1).chunk_ids)


def test_only_acl_permitted_documents_of_ones_own_tenant_are_readable(catalog):
    catalog.publish(T1, "seg-1", "tiny", [stage("travel", 1), stage("board", 1, groups=("exec",)),
                                          stage("handbook", 1, groups=(), visibility="tenant")], "job-1")
    catalog.publish(T2, "seg-9", "tiny", [stage("travel", 1, tenant=T2)], "job-2")
    assert set(catalog.readable_documents(STAFF)) == {"travel", "handbook"}
    assert set(catalog.readable_documents(EXEC)) == {"board", "handbook"}
    assert set(catalog.readable_documents(NOBODY)) == {"handbook"}
    assert set(catalog.readable_documents(OTHER_TENANT_STAFF)) == {"travel"}
    readable = catalog.readable_documents(STAFF)["travel"]
    assert (readable.document_id, readable.version, readable.title, readable.source) == (
        "travel", 1, "Title of travel", "/docs/travel.md")


def test_a_new_version_replaces_the_old_one_at_once(catalog):
    catalog.publish(T1, "seg-1", "tiny", [stage("travel", 1)], "job-1")
    catalog.publish(T1, "seg-2", "tiny", [stage("travel", 2)], "job-2")
    assert catalog.readable_documents(STAFF)["travel"].version == 2
    assert catalog.published_segment(T1) == "seg-2"
    record = catalog.get_document(T1, "travel")
    assert (record.published_version, record.latest_version) == (2, 2)


def test_a_document_naming_its_predecessor_retires_it(catalog):
    catalog.publish(T1, "seg-1", "tiny", [stage("policy-2023", 1)], "job-1")
    catalog.publish(T1, "seg-2", "tiny", [stage("policy-2024", 1, supersedes="policy-2023")], "job-2")
    assert set(catalog.readable_documents(STAFF)) == {"policy-2024"}
    assert catalog.get_document(T1, "policy-2023").status == "superseded"


def test_acl_changes_are_effective_on_the_next_read_and_audited(catalog):
    catalog.publish(T1, "seg-1", "tiny", [stage("travel", 1)], "job-1")
    first = catalog.get_document(T1, "travel").acl_version
    version = catalog.set_acl(T1, "travel", ["exec"], actor="admin")
    assert version > first and catalog.get_document(T1, "travel").acl_version == version
    assert "travel" not in catalog.readable_documents(STAFF) and "travel" in catalog.readable_documents(EXEC)
    tenant_wide = catalog.set_acl(T1, "travel", ["*"], actor="admin")
    assert tenant_wide >= version and "travel" in catalog.readable_documents(NOBODY)
    actions = [(row["actor"], row["action"], row["target"]) for row in catalog.audit_log(T1)]
    assert ("admin", "acl_set", "travel") in actions
    with pytest.raises(NotFound):
        catalog.set_acl(T1, "no-such-document", ["staff"], actor="admin")


def test_a_withdrawn_document_is_unreadable_at_once_and_audited(catalog):
    catalog.publish(T1, "seg-1", "tiny", [stage("travel", 1), stage("expenses", 1)], "job-1")
    catalog.withdraw(T1, "travel", actor="admin")
    assert set(catalog.readable_documents(STAFF)) == {"expenses"}
    assert catalog.get_document(T1, "travel").status == "withdrawn"
    assert ("admin", "withdraw", "travel") in [(r["actor"], r["action"], r["target"]) for r in catalog.audit_log()]
    with pytest.raises(NotFound):
        catalog.withdraw(T1, "no-such-document", actor="admin")


# -- versions ---------------------------------------------------------------------------------


def test_versions_are_monotonic_and_reingesting_published_content_is_a_no_op(catalog):
    digest = stage("travel", 1).content_hash
    assert catalog.next_version(T1, "travel", digest) == (1, False)
    assert catalog.next_version(T1, "travel", digest, requested=4) == (4, False)
    catalog.publish(T1, "seg-1", "tiny", [stage("travel", 1)], "job-1")
    assert catalog.next_version(T1, "travel", digest) == (1, True)
    assert catalog.next_version(T1, "travel", content_hash("changed")) == (2, False)
    with pytest.raises(CitadelError) as raised:
        catalog.next_version(T1, "travel", content_hash("changed"), requested=1)
    assert raised.value.code == "stale_version"
    catalog.withdraw(T1, "travel", actor="admin")
    assert catalog.next_version(T1, "travel", digest) == (2, False), "withdrawn content is not published"


def test_latest_versions_cover_only_the_tenants_asked_for(catalog):
    catalog.publish(T1, "seg-1", "tiny", [stage("travel", 1), stage("board", 1)], "job-1")
    catalog.publish(T1, "seg-2", "tiny", [stage("travel", 2)], "job-2")
    catalog.publish(T2, "seg-9", "tiny", [stage("travel", 1, tenant=T2)], "job-3")
    latest = catalog.latest_versions([T1])
    assert set(latest) == {(T1, "travel"), (T1, "board")}
    assert latest[(T1, "travel")] == LatestVersion(2, stage("travel", 2).content_hash, "published")
    assert set(catalog.latest_versions([T1, T2])) == {(T1, "travel"), (T1, "board"), (T2, "travel")}
    assert catalog.latest_versions([]) == {}


# -- jobs, dead letters, audit ----------------------------------------------------------------


def test_jobs_run_then_finish_with_their_report(catalog):
    job_id = catalog.create_job(T1, "ingest")
    assert job_id != catalog.create_job(T1, "ingest")
    job = catalog.get_job(job_id)
    assert (job["job_id"], job["tenant_id"], job["kind"], job["status"], job["report"]) == (
        job_id, T1, "ingest", "running", None)
    catalog.finish_job(job_id, "succeeded", {"documents": 2, "failed": []})
    done = catalog.get_job(job_id)
    assert done["status"] == "succeeded" and done["report"] == {"documents": 2, "failed": []}
    assert catalog.get_job("no-such-job") is None


def test_dead_letters_are_listed_per_tenant_until_retried(catalog):
    job_id = catalog.create_job(T1, "ingest")
    first = catalog.add_dead_letter(job_id, T1, "a.pdf", "parse_failed", "bad xref", {"size": 10})
    second = catalog.add_dead_letter(job_id, T2, "b.md", "too_large", "over the limit", {})
    assert first != second
    [row] = catalog.dead_letters(T1)
    assert (row["id"], row["source"], row["code"], row["reason"], row["meta"]) == (
        first, "a.pdf", "parse_failed", "bad xref", {"size": 10})
    assert [r["id"] for r in catalog.dead_letters()] == [first, second]
    catalog.mark_dead_letter_retried(first)
    assert catalog.dead_letters(T1) == []
    assert [r["id"] for r in catalog.dead_letters(T1, include_retried=True)] == [first]


def test_audit_rows_are_appended_in_order_with_their_detail(catalog):
    catalog.audit("admin", "credential_add", T1, "app-1", {"tenants": [T1]})
    catalog.audit("admin", "credential_revoke", T2, "app-2", {})
    rows = catalog.audit_log()
    assert [(r["action"], r["tenant_id"], r["target"], r["detail"]) for r in rows[-2:]] == [
        ("credential_add", T1, "app-1", {"tenants": [T1]}), ("credential_revoke", T2, "app-2", {})]
    assert all(r["tenant_id"] == T1 for r in catalog.audit_log(T1))


# -- the answer log ---------------------------------------------------------------------------


def test_the_answer_log_appends_and_never_replaces(catalog):
    first = catalog.log_answer("req-1", T1, "alice", "q1", {"answer": "a1"}, correlation_id="c-1")
    again = catalog.log_answer("req-1", T1, "alice", "q1 again", {"answer": "a2"}, cached=True)
    other = catalog.log_answer("req-2", T2, "dave", "q2", {"answer": "a3"})
    assert first < again < other
    rows = catalog.answer_log(T1)
    assert [(r["request_id"], r["question"], r["response"], r["cached"]) for r in rows] == [
        ("req-1", "q1", {"answer": "a1"}, False), ("req-1", "q1 again", {"answer": "a2"}, True)]
    assert rows[0]["correlation_id"] == "c-1"
    assert [r["request_id"] for r in catalog.answer_log(limit=2)] == ["req-1", "req-2"], "newest two, oldest first"


def test_the_answer_log_reads_the_rows_since_a_time(catalog):
    catalog.log_answer("old", T1, "alice", "q1", {})
    time.sleep(0.01)
    cutoff = time.time()
    catalog.log_answer("new", T1, "alice", "q2", {})
    catalog.log_answer("other-tenant", T2, "dave", "q3", {})
    assert [r["request_id"] for r in catalog.answer_log(T1, since=cutoff)] == ["new"]
    assert [r["request_id"] for r in catalog.answer_log(since=cutoff)] == ["new", "other-tenant"]
    assert [r["request_id"] for r in catalog.answer_log(T1)] == ["old", "new"], "no `since`: every row"


def test_the_retention_purge_removes_only_old_rows(catalog):
    catalog.log_answer("req-1", T1, "alice", "q", {})
    assert catalog.purge_answers(older_than_s=3_600) == 0
    time.sleep(0.01)
    assert catalog.purge_answers(older_than_s=0) == 1
    assert catalog.answer_log() == []


def test_a_withdrawal_forgets_only_the_answers_citing_the_document(catalog):
    cited = {"answer": "quote [1]", "citations": [{"document_id": "memo", "version": 1}],
             "passages": [{"document_id": "memo"}]}
    catalog.log_answer("cites", T1, "alice", "q", cited)
    catalog.log_answer("retrieved-only", T1, "alice", "q", {"citations": [], "passages": [{"document_id": "memo"}]})
    catalog.log_answer("other-doc", T1, "alice", "q", {"citations": [{"document_id": "memo-2", "version": 1}]})
    catalog.log_answer("other-tenant", T2, "alice", "q", cited)
    catalog.log_answer("refusal", T1, "alice", "q", {"refused": True, "citations": None})
    assert catalog.forget_answers_citing(T1, "memo") == 1
    assert [r["request_id"] for r in catalog.answer_log()] == ["retrieved-only", "other-doc", "other-tenant",
                                                                 "refusal"]
    assert catalog.forget_answers_citing(T1, "memo") == 0


def test_document_chunk_ids_span_every_version(catalog):
    catalog.publish(T1, "seg1", "tiny", [stage("memo", 1)], "job1")
    catalog.publish(T1, "seg2", "tiny", [stage("memo", 2), stage("other", 1)], "job2")
    assert catalog.document_chunk_ids(T1, "memo") == {make_chunk_id(T1, "memo", v, i) for v in (1, 2) for i in range(3)}
    assert catalog.document_chunk_ids(T1, "missing") == set()


# -- failure ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(BACKENDS))
def test_a_database_failure_leaves_as_catalog_unavailable(name, request, tmp_path):
    broken = BACKENDS[name](request, tmp_path)
    broken.close()  # every later call meets a closed database
    with pytest.raises(CatalogUnavailable):
        broken.readable_documents(STAFF)
    with pytest.raises(CatalogUnavailable):
        broken.ensure_tenant(T1)


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
