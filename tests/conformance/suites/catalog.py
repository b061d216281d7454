"""The Catalog suite (DESIGN.md §3, §7; citadel/catalog/base.py).

What callers rely on: the Catalog protocol and its roles (the live permission check above all: only
published, current, ACL-permitted documents of the principal's own tenant are readable, and an ACL
change or a withdrawal is effective on the next read), monotonic versions with idempotent
re-ingestion, the atomic publish, jobs, dead letters and the append-only logs read back through
CatalogAudit, and the one failure type: any database error leaves as CatalogUnavailable.
"""

from __future__ import annotations

import time

import pytest

from citadel.catalog.base import (AnswerLog, AuditLog, CandidateQueue, Catalog, CatalogAudit, ExpiredDocument,
                                  GovernanceRegistry, JobLog, LatestVersion, PermissionSource, Publisher,
                                  StagedVersion, TierEntry, TrafficLog)
from citadel.errors import CatalogUnavailable, CitadelError, InvalidTenant, NotFound
from citadel.types import DocumentMeta, Governance, Principal, content_hash, make_chunk_id

T1, T2 = "acme", "globex"
STAFF = Principal(T1, "alice", frozenset({"staff"}))
EXEC = Principal(T1, "bob", frozenset({"exec"}))
NOBODY = Principal(T1, "carol", frozenset())
OTHER_TENANT_STAFF = Principal(T2, "dave", frozenset({"staff"}))


def stage(doc: str, version: int, groups=("staff",), *, tenant: str = T1, visibility: str = "groups",
          supersedes: str | None = None, body: str = "", governance: Governance = Governance(),
          effective_date: str | None = None) -> StagedVersion:
    meta = DocumentMeta(tenant, doc, title=f"Title of {doc}", source=f"/docs/{doc}.md", owner="owner@acme",
                        visibility=visibility, supersedes=supersedes, groups=tuple(groups), governance=governance,
                        effective_date=effective_date)
    chunk_ids = tuple(make_chunk_id(tenant, doc, version, i) for i in range(3))
    return StagedVersion(meta, version, content_hash(f"{doc}:{body or version}"), chunk_ids,
                         tuple(content_hash(c) for c in chunk_ids))


ROLES = (PermissionSource, Publisher, JobLog, AuditLog, AnswerLog, CandidateQueue, GovernanceRegistry, TrafficLog)


class CatalogConformance:
    """Override `backend` (function-scoped: every test starts from an empty catalog) with the catalog
    under test; the suite creates the two tenants and closes it."""

    @pytest.fixture
    def backend(self) -> Catalog:
        raise NotImplementedError("a conformance subclass provides an empty catalog")

    @pytest.fixture
    def catalog(self, backend):
        backend.ensure_tenant(T1)
        backend.ensure_tenant(T2)
        yield backend
        backend.close()

    def test_implements_protocols(self, catalog):
        assert isinstance(catalog, Catalog) and isinstance(catalog, CatalogAudit)
        assert [role.__name__ for role in ROLES if not isinstance(catalog, role)] == []

    # -- tenants ----------------------------------------------------------------------------------

    def test_tenants_are_created_once_and_listed_in_order(self, catalog):
        catalog.ensure_tenant(T1)  # idempotent
        catalog.publish(T1, "seg-1", "tiny", [stage("travel", 1)], "job-1")
        rows = {row["tenant_id"]: row for row in catalog.list_tenants()}
        assert list(rows) == sorted([T1, T2])
        assert rows[T1]["segment_id"] == "seg-1" and rows[T1]["published_documents"] == 1
        assert rows[T1]["published_chunks"] == 3
        assert rows[T2]["segment_id"] is None and rows[T2]["published_documents"] == 0

    @pytest.mark.parametrize("bad", ["", "Acme", "../etc", "a:b", "a b", "ácme", "a" * 64])
    def test_a_tenant_id_that_is_not_a_plain_name_is_refused(self, catalog, bad):
        with pytest.raises(InvalidTenant):
            catalog.ensure_tenant(bad)

    # -- publishing and the live permission check -------------------------------------------------

    def test_publish_switches_the_pointer_and_records_the_documents(self, catalog):
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

    def test_only_acl_permitted_documents_of_ones_own_tenant_are_readable(self, catalog):
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

    def test_a_new_version_replaces_the_old_one_at_once(self, catalog):
        catalog.publish(T1, "seg-1", "tiny", [stage("travel", 1)], "job-1")
        catalog.publish(T1, "seg-2", "tiny", [stage("travel", 2)], "job-2")
        assert catalog.readable_documents(STAFF)["travel"].version == 2
        assert catalog.published_segment(T1) == "seg-2"
        record = catalog.get_document(T1, "travel")
        assert (record.published_version, record.latest_version) == (2, 2)

    def test_a_document_naming_its_predecessor_retires_it(self, catalog):
        catalog.publish(T1, "seg-1", "tiny", [stage("policy-2023", 1)], "job-1")
        catalog.publish(T1, "seg-2", "tiny", [stage("policy-2024", 1, supersedes="policy-2023")], "job-2")
        assert set(catalog.readable_documents(STAFF)) == {"policy-2024"}
        assert catalog.get_document(T1, "policy-2023").status == "superseded"

    # -- governance ---------------------------------------------------------------------------------

    def test_governance_is_recorded_per_version_and_a_policy_resolves_to_its_current_one(self, catalog):
        v1 = Governance("TRV-1", "1", "internal", "standard")
        catalog.publish(T1, "seg-1", "tiny", [stage("travel", 1, governance=v1), stage("plain", 1)], "job-1")
        assert catalog.get_document(T1, "travel").governance == v1
        assert catalog.get_document(T1, "plain").governance == Governance()
        assert catalog.current_policy(T1, "TRV-1").published_version == 1
        v2 = Governance("TRV-1", "2", "confidential", "standard")
        catalog.publish(T1, "seg-2", "tiny", [stage("travel", 2, governance=v2)], "job-2")
        current = catalog.current_policy(T1, "TRV-1")
        assert (current.document_id, current.published_version, current.governance) == ("travel", 2, v2)
        assert catalog.current_policy(T2, "TRV-1") is None and catalog.current_policy(T1, "NOPE") is None
        catalog.withdraw(T1, "travel", actor="admin")
        assert catalog.current_policy(T1, "TRV-1") is None  # only a published document is a current policy

    def test_expired_documents_are_those_past_their_class_from_their_date(self, catalog):
        short, standard = Governance(retention_class="short"), Governance(retention_class="standard")
        catalog.publish(T1, "seg-1", "tiny", [
            stage("old", 1, governance=short, effective_date="2020-01-01"),
            stage("recent", 1, governance=short, effective_date="2099-01-01"),
            stage("kept", 1, governance=standard, effective_date="2020-01-01"),
            stage("undated", 1, governance=short), stage("unclassed", 1, effective_date="2020-01-01")], "job-1")
        now = time.time()
        days = {"short": 365.0, "standard": 100_000.0}
        assert catalog.expired_documents(days, now, 10) == [ExpiredDocument(T1, "old", "short")]
        # an undated version counts from its publication
        later = catalog.expired_documents(days, now + 400 * 86_400, 10)
        assert [e.document_id for e in later] == ["old", "undated"]
        assert catalog.expired_documents(days, now + 400 * 86_400, 1) == [ExpiredDocument(T1, "old", "short")]
        catalog.withdraw(T1, "old", actor="retention")
        assert catalog.expired_documents(days, now, 10) == []

    def test_acl_changes_are_effective_on_the_next_read_and_audited(self, catalog):
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

    def test_a_withdrawn_document_is_unreadable_at_once_and_audited(self, catalog):
        catalog.publish(T1, "seg-1", "tiny", [stage("travel", 1), stage("expenses", 1)], "job-1")
        catalog.withdraw(T1, "travel", actor="admin")
        assert set(catalog.readable_documents(STAFF)) == {"expenses"}
        assert catalog.get_document(T1, "travel").status == "withdrawn"
        assert ("admin", "withdraw", "travel") in [(r["actor"], r["action"], r["target"]) for r in catalog.audit_log()]
        with pytest.raises(NotFound):
            catalog.withdraw(T1, "no-such-document", actor="admin")

    # -- versions ---------------------------------------------------------------------------------

    def test_versions_are_monotonic_and_reingesting_published_content_is_a_no_op(self, catalog):
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

    def test_latest_versions_cover_only_the_tenants_asked_for(self, catalog):
        catalog.publish(T1, "seg-1", "tiny", [stage("travel", 1), stage("board", 1)], "job-1")
        catalog.publish(T1, "seg-2", "tiny", [stage("travel", 2)], "job-2")
        catalog.publish(T2, "seg-9", "tiny", [stage("travel", 1, tenant=T2)], "job-3")
        latest = catalog.latest_versions([T1])
        assert set(latest) == {(T1, "travel"), (T1, "board")}
        assert latest[(T1, "travel")] == LatestVersion(2, stage("travel", 2).content_hash, "published")
        assert set(catalog.latest_versions([T1, T2])) == {(T1, "travel"), (T1, "board"), (T2, "travel")}
        assert catalog.latest_versions([]) == {}

    # -- jobs, dead letters, audit ----------------------------------------------------------------

    def test_jobs_run_then_finish_with_their_report(self, catalog):
        job_id = catalog.create_job(T1, "ingest")
        assert job_id != catalog.create_job(T1, "ingest")
        job = catalog.get_job(job_id)
        assert (job["job_id"], job["tenant_id"], job["kind"], job["status"], job["report"]) == (
            job_id, T1, "ingest", "running", None)
        catalog.finish_job(job_id, "succeeded", {"documents": 2, "failed": []})
        done = catalog.get_job(job_id)
        assert done["status"] == "succeeded" and done["report"] == {"documents": 2, "failed": []}
        assert catalog.get_job("no-such-job") is None

    def test_a_queued_job_reserves_versions_and_waits_for_its_release(self, catalog):
        catalog.publish(T1, "seg-1", "tiny", [stage("travel", 4)], "job-0")
        first = catalog.queue_ingest_job(T1, "travel", {"filename": "t.md"}, "uploader", 30.0, now=100.0)
        second = catalog.queue_ingest_job(T1, "travel", {"filename": "t.md"}, "uploader", 30.0, now=101.0)
        other = catalog.queue_ingest_job(T1, "board", {}, "uploader", 30.0, now=102.0)
        assert (first.version, second.version, other.version) == (5, 6, 1)  # above recorded and reserved ones
        job = catalog.get_job(first.job_id)
        assert (job["status"], job["state"], job["document_id"], job["version"], job["attempts"]) == (
            "queued", "leased", "travel", 5, 0)
        assert catalog.claim_job("runner-a", 10.0, now=110.0) is None  # the uploader still holds them
        assert catalog.release_job(first.job_id, "someone-else") is False
        assert catalog.release_job(first.job_id, "uploader") is True
        claimed = catalog.claim_job("runner-a", 10.0, now=111.0)
        assert (claimed.job_id, claimed.tenant_id, claimed.document_id, claimed.version, claimed.spec,
                claimed.attempts) == (first.job_id, T1, "travel", 5, {"filename": "t.md"}, 1)
        assert catalog.get_job(first.job_id)["status"] == "running"
        assert [j["job_id"] for j in catalog.list_jobs([T1])][:1] == [other.job_id]  # newest first
        assert catalog.list_jobs([T2]) == []

    def test_a_job_lease_is_held_by_one_owner_until_it_runs_out(self, catalog):
        queued = catalog.queue_ingest_job(T1, "travel", {}, "uploader", 30.0, now=0.0)
        catalog.release_job(queued.job_id, "uploader")
        assert catalog.claim_job("runner-a", 10.0, now=1.0).job_id == queued.job_id
        assert catalog.claim_job("runner-b", 10.0, now=5.0) is None  # a's lease runs to 11
        assert catalog.renew_job_lease(queued.job_id, "runner-a", 10.0, now=9.0, progress={"stage": "embed"})
        assert catalog.claim_job("runner-b", 10.0, now=15.0) is None  # renewed to 19
        assert catalog.get_job(queued.job_id)["progress"] == {"stage": "embed"}
        taken = catalog.claim_job("runner-b", 10.0, now=20.0)  # a stopped renewing
        assert (taken.job_id, taken.attempts) == (queued.job_id, 2)
        assert catalog.renew_job_lease(queued.job_id, "runner-a", 10.0, now=21.0) is False
        assert catalog.finish_leased_job(queued.job_id, "runner-a", "succeeded", {"by": "a"}) is False
        assert catalog.release_job(queued.job_id, "runner-a") is False
        catalog.finish_job(queued.job_id, "failed", {"by": "an engine"})  # a queued job ends by its lease only
        assert catalog.get_job(queued.job_id)["status"] == "running"
        assert catalog.finish_leased_job(queued.job_id, "runner-b", "succeeded", {"by": "b"}) is True
        done = catalog.get_job(queued.job_id)
        assert (done["status"], done["state"], done["report"]) == ("succeeded", "done", {"by": "b"})
        assert catalog.claim_job("runner-c", 10.0, now=1_000.0) is None  # done is never claimed again

    def test_two_runners_racing_claim_each_job_once(self, catalog):
        import concurrent.futures

        for n in range(6):
            catalog.release_job(catalog.queue_ingest_job(T1, f"doc-{n}", {}, "up", 30.0, now=0.0).job_id, "up")
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            claims = list(pool.map(lambda n: catalog.claim_job(f"runner-{n}", 30.0, now=1.0), range(10)))
        claimed = [c.job_id for c in claims if c is not None]
        assert len(claimed) == 6 and len(set(claimed)) == 6

    def test_dead_letters_are_listed_per_tenant_until_retried(self, catalog):
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

    def test_audit_rows_are_appended_in_order_with_their_detail(self, catalog):
        catalog.audit("admin", "credential_add", T1, "app-1", {"tenants": [T1]})
        catalog.audit("admin", "credential_revoke", T2, "app-2", {})
        rows = catalog.audit_log()
        assert [(r["action"], r["tenant_id"], r["target"], r["detail"]) for r in rows[-2:]] == [
            ("credential_add", T1, "app-1", {"tenants": [T1]}), ("credential_revoke", T2, "app-2", {})]
        assert all(r["tenant_id"] == T1 for r in catalog.audit_log(T1))

    # -- the answer log ---------------------------------------------------------------------------

    def test_the_answer_log_appends_and_never_replaces(self, catalog):
        first = catalog.log_answer("req-1", T1, "alice", "q1", {"answer": "a1"}, correlation_id="c-1")
        again = catalog.log_answer("req-1", T1, "alice", "q1 again", {"answer": "a2"}, cached=True)
        other = catalog.log_answer("req-2", T2, "dave", "q2", {"answer": "a3"})
        assert first < again < other
        rows = catalog.answer_log(T1)
        assert [(r["request_id"], r["question"], r["response"], r["cached"]) for r in rows] == [
            ("req-1", "q1", {"answer": "a1"}, False), ("req-1", "q1 again", {"answer": "a2"}, True)]
        assert rows[0]["correlation_id"] == "c-1"
        assert [r["request_id"] for r in catalog.answer_log(limit=2)] == ["req-1", "req-2"], "newest two, oldest first"

    def test_the_answer_log_reads_the_rows_since_a_time(self, catalog):
        catalog.log_answer("old", T1, "alice", "q1", {})
        time.sleep(0.01)
        cutoff = time.time()
        catalog.log_answer("new", T1, "alice", "q2", {})
        catalog.log_answer("other-tenant", T2, "dave", "q3", {})
        assert [r["request_id"] for r in catalog.answer_log(T1, since=cutoff)] == ["new"]
        assert [r["request_id"] for r in catalog.answer_log(since=cutoff)] == ["new", "other-tenant"]
        assert [r["request_id"] for r in catalog.answer_log(T1)] == ["old", "new"], "no `since`: every row"

    def test_the_retention_purge_removes_only_old_rows(self, catalog):
        catalog.log_answer("req-1", T1, "alice", "q", {})
        assert catalog.purge_answers(older_than_s=3_600) == 0
        time.sleep(0.01)
        assert catalog.purge_answers(older_than_s=0) == 1
        assert catalog.answer_log() == []

    def test_a_withdrawal_forgets_only_the_answers_citing_the_document(self, catalog):
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

    def test_document_chunk_ids_span_every_version(self, catalog):
        catalog.publish(T1, "seg1", "tiny", [stage("memo", 1)], "job1")
        catalog.publish(T1, "seg2", "tiny", [stage("memo", 2), stage("other", 1)], "job2")
        assert catalog.document_chunk_ids(T1, "memo") == {make_chunk_id(T1, "memo", v, i) for v in (1, 2) for i in range(3)}
        assert catalog.document_chunk_ids(T1, "missing") == set()

    # -- tier traffic ------------------------------------------------------------------------------

    def test_queries_add_up_per_tenant_and_day_and_old_days_go(self, catalog):
        catalog.record_queries(100, {T1: 3, T2: 1}, keep_days=3)
        catalog.record_queries(100, {T1: 2}, keep_days=3)  # another replica's count of the same day
        catalog.record_queries(101, {T1: 5}, keep_days=3)
        assert catalog.queries_since([T1, T2], 100) == {T1: 10, T2: 1}
        assert catalog.queries_since([T1, T2], 101) == {T1: 5}
        catalog.record_queries(103, {T2: 4}, keep_days=3)  # day 100 falls out of the window
        assert catalog.queries_since([T1, T2], 0) == {T1: 5, T2: 4}

    def test_a_partition_keeps_the_time_it_entered_its_tier(self, catalog):
        catalog.publish(T1, "seg1", "cold", [stage("memo", 1)], "job1")
        (entered,) = catalog.tier_entries([T1, T2]).values()
        time.sleep(0.01)
        catalog.publish(T1, "seg2", "cold", [stage("memo", 2)], "job2")
        assert catalog.tier_entries([T1]) == {T1: entered}
        catalog.publish(T1, "seg3", "hot", [stage("memo", 3)], "job3")
        moved = catalog.tier_entries([T1])[T1]
        assert moved.tier == "hot" and moved.entered_at > entered.entered_at and entered.tier == "cold"
        assert isinstance(moved, TierEntry)

    # -- failure ----------------------------------------------------------------------------------

    def test_a_database_failure_leaves_as_catalog_unavailable(self, backend):
        backend.close()  # every later call meets a closed database
        with pytest.raises(CatalogUnavailable):
            backend.readable_documents(STAFF)
        with pytest.raises(CatalogUnavailable):
            backend.ensure_tenant(T1)


# -- the backends, shared by the suites of the catalog's roles (catalog, candidate queue, prompt store) --


class SQLiteFileBackend:
    @pytest.fixture
    def backend(self, tmp_path):
        from citadel.catalog.sqlite import SQLiteCatalog

        return SQLiteCatalog(tmp_path / "catalog.sqlite")


class SQLiteMemoryBackend:
    @pytest.fixture
    def backend(self):
        from citadel.catalog.sqlite import SQLiteCatalog

        return SQLiteCatalog(":memory:")


class PostgresBackend:
    """A catalog on a fresh database of the session's server (dropped after the test, once the catalog
    is closed); the test module imports the `postgres_dsn` fixture from tests/postgres_server.py."""

    @pytest.fixture
    def backend(self, postgres_dsn):
        from citadel.catalog.postgres import PostgresCatalog
        from tests.postgres_server import fresh_database

        dsn, drop = fresh_database(postgres_dsn)
        yield PostgresCatalog(dsn, min_size=1, max_size=4)
        drop()


class GuardedSQLiteBackend:
    """A serving process's catalog: SQLite with its query-path reads behind the catalog guard."""

    @pytest.fixture
    def backend(self, tmp_path):
        from citadel.catalog.sqlite import SQLiteCatalog
        from citadel.resilience.guards import Guard, GuardedCatalog

        return GuardedCatalog(SQLiteCatalog(tmp_path / "catalog.sqlite"), Guard())

