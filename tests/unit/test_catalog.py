import pytest

from citadel.catalog.base import StagedVersion
from citadel.catalog.sqlite import SQLiteCatalog
from citadel.errors import CitadelError, NotFound
from citadel.types import DocumentMeta, Principal


@pytest.fixture
def catalog(tmp_path):
    catalog = SQLiteCatalog(tmp_path / "catalog.sqlite")
    catalog.ensure_tenant("acme")
    yield catalog
    catalog.close()


def _stage(doc, version, groups=("staff",), supersedes=None, visibility="groups"):
    meta = DocumentMeta("acme", doc, title=doc.title(), source=f"/docs/{doc}.md", groups=tuple(groups),
                        supersedes=supersedes, visibility=visibility)
    ids = tuple(f"acme:{doc}:v{version}:{i:04d}" for i in range(2))
    return StagedVersion(meta, version, f"hash-{doc}-{version}", ids, ("h0", "h1"))


STAFF = Principal("acme", "u1", frozenset({"staff"}))


def test_publish_makes_documents_readable_by_group(catalog):
    catalog.publish("acme", "seg1", "tiny", [_stage("travel", 1), _stage("exec", 1, groups=("exec",))], "job1")
    assert set(catalog.readable_documents(STAFF)) == {"travel"}
    assert set(catalog.readable_documents(Principal("acme", "b", frozenset({"exec"})))) == {"exec"}
    assert catalog.readable_documents(Principal("other", "c", frozenset({"staff"}))) == {}
    assert catalog.published_segment("acme") == "seg1"
    assert catalog.manifest("acme", "travel", 1) == ["acme:travel:v1:0000", "acme:travel:v1:0001"]


def test_new_version_supersedes_old(catalog):
    catalog.publish("acme", "seg1", "tiny", [_stage("travel", 1)], "job1")
    catalog.publish("acme", "seg2", "tiny", [_stage("travel", 2)], "job2")
    assert catalog.readable_documents(STAFF)["travel"].version == 2
    record = catalog.get_document("acme", "travel")
    assert record.published_version == 2 and record.latest_version == 2


def test_supersedes_field_retires_the_named_document(catalog):
    catalog.publish("acme", "seg1", "tiny", [_stage("discount-2025", 1)], "job1")
    catalog.publish("acme", "seg2", "tiny", [_stage("discount-2026", 1, supersedes="discount-2025")], "job2")
    assert set(catalog.readable_documents(STAFF)) == {"discount-2026"}
    assert catalog.get_document("acme", "discount-2025").status == "superseded"


def test_tenant_wide_visibility(catalog):
    catalog.publish("acme", "seg1", "tiny", [_stage("handbook", 1, groups=(), visibility="tenant")], "job1")
    assert "handbook" in catalog.readable_documents(Principal("acme", "x", frozenset()))


def test_acl_change_and_withdrawal_are_immediate(catalog):
    catalog.publish("acme", "seg1", "tiny", [_stage("travel", 1)], "job1")
    version = catalog.set_acl("acme", "travel", ["exec"], actor="admin")
    assert version == 2
    assert catalog.readable_documents(STAFF) == {}
    catalog.set_acl("acme", "travel", ["staff"], actor="admin")
    assert "travel" in catalog.readable_documents(STAFF)
    catalog.withdraw("acme", "travel", actor="admin")
    assert catalog.readable_documents(STAFF) == {}
    actions = [entry["action"] for entry in catalog.audit_log("acme")]
    assert actions == ["publish", "acl_set", "acl_set", "withdraw"]


def test_unknown_document_raises_not_found(catalog):
    with pytest.raises(NotFound):
        catalog.withdraw("acme", "nope", actor="admin")
    with pytest.raises(NotFound):
        catalog.set_acl("acme", "nope", ["g"], actor="admin")


def test_next_version_is_monotonic_and_idempotent(catalog):
    assert catalog.next_version("acme", "travel", "hash-travel-1") == (1, False)
    catalog.publish("acme", "seg1", "tiny", [_stage("travel", 1)], "job1")
    assert catalog.next_version("acme", "travel", "hash-travel-1") == (1, True)
    assert catalog.next_version("acme", "travel", "other") == (2, False)
    assert catalog.next_version("acme", "travel", "other", requested=5) == (5, False)
    with pytest.raises(CitadelError):
        catalog.next_version("acme", "travel", "other", requested=1)


def test_failed_publish_leaves_nothing_visible(catalog):
    catalog.publish("acme", "seg1", "tiny", [_stage("travel", 1)], "job1")
    broken = _stage("travel", 1)  # duplicate version: the insert fails inside the transaction
    with pytest.raises(Exception):
        catalog.publish("acme", "seg2", "tiny", [_stage("expenses", 1), broken], "job2")
    assert catalog.published_segment("acme") == "seg1"
    assert set(catalog.readable_documents(STAFF)) == {"travel"}


def test_jobs_and_dead_letters(catalog):
    job = catalog.create_job("acme", "ingest")
    letter = catalog.add_dead_letter(job, "acme", "/x.pdf", "parse_error", "not a PDF", {"document_id": "x"})
    assert [d["id"] for d in catalog.dead_letters("acme")] == [letter]
    catalog.mark_dead_letter_retried(letter)
    assert catalog.dead_letters("acme") == []
    catalog.finish_job(job, "partial", {"failed": 1})
    assert catalog.get_job(job)["report"] == {"failed": 1}


def test_republished_predecessor_stays_superseded(catalog):
    catalog.publish("acme", "seg1", "tiny", [_stage("discount-2025", 1)], "job1")
    catalog.publish("acme", "seg2", "tiny", [_stage("discount-2026", 1, supersedes="discount-2025")], "job2")
    catalog.publish("acme", "seg3", "tiny", [_stage("discount-2025", 2)], "job3")
    assert set(catalog.readable_documents(STAFF)) == {"discount-2026"}


def test_answer_log_appends_and_the_purger_deletes_only_expired_rows(catalog, tmp_path):
    import sqlite3
    import time

    from citadel.catalog.retention import AnswerLogPurger
    from citadel.config import AnswerConfig

    first = catalog.log_answer("r1", "acme", "u1", "q1", {"reason": None}, correlation_id="c1")
    second = catalog.log_answer("r1", "acme", "u2", "q2", {"reason": None}, correlation_id="c1", cached=True)
    assert second > first
    assert [(r["user_id"], r["cached"]) for r in catalog.answer_log("acme")] == [("u1", False), ("u2", True)]
    with sqlite3.connect(tmp_path / "catalog.sqlite") as db:
        db.execute("INSERT INTO answer_log (request_id, ts, tenant_id, user_id, question, response)"
                   " VALUES ('old', ?, 'acme', 'u3', 'q', '{}')", (time.time() - 3 * 86_400,))
    purger = AnswerLogPurger(catalog, AnswerConfig(answer_log_retention_days=1), interval_s=3_600).start()
    deadline = time.monotonic() + 10
    while any(r["request_id"] == "old" for r in catalog.answer_log()) and time.monotonic() < deadline:
        time.sleep(0.05)
    purger.stop()
    assert [r["request_id"] for r in catalog.answer_log()] == ["r1", "r1"]


def test_the_sqlite_schema_is_the_migrations_in_sqlite_spelling(tmp_path):
    import sqlite3

    from citadel.catalog.migrations import migrations
    from citadel.catalog.sqlite import sqlite_schema

    declared = {line.split()[2] for m in migrations() for line in m.sql.splitlines()
                if line.startswith("CREATE TABLE ")}
    db = sqlite3.connect(tmp_path / "schema.sqlite")
    db.executescript(sqlite_schema())
    db.executescript(sqlite_schema())  # applied on every open: a no-op the second time
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert declared <= tables and {"answer_log", "prompt_vault", "eval_candidates"} <= declared
    columns = {row[1]: row[2] for row in db.execute("PRAGMA table_info(prompt_vault)")}
    assert (columns["id"], columns["ts"], columns["nonce"]) == ("INTEGER", "REAL", "BLOB")
    db.execute("INSERT INTO audit_log (ts, actor, action, tenant_id, target, detail) VALUES (1, 'a', 'b', 'c', 'd', '{}')")
    with pytest.raises(sqlite3.IntegrityError, match="audit_log is append-only"):
        db.execute("DELETE FROM audit_log")


def test_a_migration_sqlite_cannot_apply_is_refused_not_skipped():
    from citadel.catalog.migrations import Migration
    from citadel.catalog.sqlite import sqlite_schema

    with pytest.raises(RuntimeError, match="ALTER"):
        sqlite_schema([Migration(4, "add_column", "ALTER TABLE jobs ADD COLUMN note TEXT;")])
