"""Durable ingestion jobs under leases (citadel/ingest/runner.py), on a SQLite catalog, the local
object store, the in-process engine with hash embeddings, and a settable clock (no sleeping).

The takeover test is the crash the runner exists for: runner A claims a job and works on it, stops
renewing (its clock-time lease runs out mid-embedding), runner B claims the job and waits on the
tenant lock A holds; A's next lease check (before it publishes) finds the job gone, so A stops without
publishing and writes nothing; B then runs the job to the end. One version is published, whole, with
the reserved version's chunk ids and no duplicates; the job row is B's.
"""

from __future__ import annotations

import threading

import pytest

from citadel.catalog.sqlite import SQLiteCatalog
from citadel.config import JobsConfig, load_config
from citadel.embedding.factory import make_embedder
from citadel.ingest.engine import TenantSources
from citadel.ingest.local import Ingestor
from citadel.ingest.objects import LocalObjectStore
from citadel.ingest.runner import Engines, JobRunner, LeaseLost, UploadSpec, job_view, queue_upload
from citadel.ingest.sources import AclSpec, TrustedFields
from citadel.ingest.steps import VersionSnapshot
from citadel.ingest.uploads import StoredRawFile, raw_key, read_raw, store_raw, stored_version, version_prefix
from tests.settable_clock import SettableClock

TENANT, DOCUMENT = "acme", "travel"
TEXT = "# Travel\n\n## Hotels\n\nThe hotel limit is 220 USD per night.\n\n## Meals\n\nMeals are 60 USD a day.\n"
LEASE_S = 30.0


@pytest.fixture
def world(tmp_path):
    config = load_config(environ={"CITADEL_HOME": str(tmp_path / "home"), "CITADEL_EMBEDDING__BACKEND": "hash"})
    catalog = SQLiteCatalog(config.catalog_path)
    catalog.ensure_tenant(TENANT)
    store = LocalObjectStore(config.home / "objects")
    embedder = make_embedder(config.embedding)
    yield config, catalog, store, embedder
    catalog.close()


def _runner(world, owner: str, clock, on_progress=None, attempts: int = 3) -> JobRunner:
    config, catalog, store, embedder = world

    def local(progress):
        def observed(stage, done, total):
            if on_progress is not None:
                on_progress(stage, done, total)
            progress(stage, done, total)
        return Ingestor(catalog, embedder, config, progress=observed)

    settings = JobsConfig(lease_s=LEASE_S, poll_s=0.01, max_attempts=attempts)
    return JobRunner(catalog, store, Engines(local), settings, config.home / "jobs", owner=owner, clock=clock,
                     heartbeat=False)


def _queue(world, clock, text: str = TEXT, document: str = DOCUMENT):
    _, catalog, store, _ = world
    spec = UploadSpec(f"{document}.md", ("staff",), TrustedFields(), len(text), "admin")
    return queue_upload(catalog, store, "uploader", LEASE_S, clock(), TENANT, document, text.encode(), spec)


def test_an_upload_is_stored_under_its_version_and_a_runner_publishes_it(world):
    _, catalog, store, _ = world
    clock = SettableClock(1_000.0)
    queued = _queue(world, clock)
    assert queued.version == 1
    assert store.list_prefix(version_prefix(TENANT, DOCUMENT, 1)) == [
        raw_key(TENANT, DOCUMENT, 1, TEXT.encode(), ".md")]
    assert catalog.get_job(queued.job_id)["state"] == "queued"

    runner = _runner(world, "runner-a", clock)
    assert runner.run_once() == queued.job_id
    assert runner.run_once() is None  # nothing else waits
    job = job_view(catalog.get_job(queued.job_id))
    assert job["status"] == "succeeded" and job["attempts"] == 1 and job["lease_expires_at"] is None
    assert job["report"]["files"][0]["version"] == 1
    progress = job["progress"]
    assert (progress["stage"], progress["documents_done"], progress["documents_total"]) == ("done", 1, 1)
    assert progress["chunks_total"] == progress["chunks_done"] == job["report"]["chunks"] > 0
    assert catalog.get_document(TENANT, DOCUMENT).published_version == 1
    assert read_raw(store, TENANT, DOCUMENT, 1).content == TEXT.encode()
    assert list((world[0].home / "jobs").iterdir()) == []  # the work copy went


def test_a_runner_that_stops_renewing_loses_the_job_and_publishes_nothing(world):
    _, catalog, store, _ = world
    clock = SettableClock(1_000.0)
    queued = _queue(world, clock)
    taken_over = threading.Event()
    b_result: list = []
    b_stages: list[str] = []

    def a_stalls(stage, done, total):
        # A stops renewing while it embeds: its lease runs out, and B claims the job.
        if stage == "embed" and not taken_over.is_set():
            clock.now += LEASE_S + 1
            runner_b = _runner(world, "runner-b", clock, on_progress=lambda s, d, t: b_stages.append(s))
            thread = threading.Thread(target=lambda: b_result.append(runner_b.run_once()))
            thread.start()
            while catalog.get_job(queued.job_id)["owner"] != "runner-b":  # B holds the lease, waits on A's lock
                thread.join(0.01)
            taken_over.set()
            b_result.append(thread)

    runner_a = _runner(world, "runner-a", clock, on_progress=a_stalls)
    publishes_before = _publishes(catalog)
    assert runner_a.run_once() == queued.job_id  # A's attempt ends (LeaseLost, caught) …
    assert taken_over.is_set()
    b_result[0].join(30)  # … and B, which waited on the tenant lock, runs the job to the end
    assert b_result[1] == queued.job_id
    assert "build" in b_stages

    job = catalog.get_job(queued.job_id)
    assert (job["status"], job["state"], job["owner"], job["attempts"]) == ("succeeded", "done", "runner-b", 2)
    assert _publishes(catalog) == publishes_before + 1  # B published once; A never did
    chunk_ids = catalog.manifest(TENANT, DOCUMENT, 1)
    assert chunk_ids and len(chunk_ids) == len(set(chunk_ids)) == job["report"]["chunks"]
    assert all(cid.startswith(f"{TENANT}:{DOCUMENT}:v1:") for cid in chunk_ids)  # the reserved version's ids
    assert catalog.document_chunk_ids(TENANT, DOCUMENT) == set(chunk_ids)  # no version half published
    assert catalog.get_document(TENANT, DOCUMENT).latest_version == 1


def test_a_lease_that_was_taken_refuses_renewal(world):
    _, catalog, _, _ = world
    clock = SettableClock(0.0)
    queued = _queue(world, clock)
    job = catalog.claim_job("runner-a", LEASE_S, clock())
    from citadel.ingest.runner import JobLease

    lease = JobLease(catalog, job, "runner-a", LEASE_S, clock)
    lease.on_progress("parse", 1, 1)  # within the lease: nothing to renew yet
    clock.now += LEASE_S + 1
    assert catalog.claim_job("runner-b", LEASE_S, clock()).job_id == queued.job_id
    with pytest.raises(LeaseLost):
        lease.on_progress("embed", 10, 20)  # a third of the lease passed: it renews, and finds B's
    with pytest.raises(LeaseLost):
        lease.on_progress("build", 0, 1)


def test_a_retried_job_after_its_publish_adds_nothing(world):
    """The runner died after the publish but before it finished the job: the next run finds the
    version published and ends unchanged, with no second copy of its chunks."""
    _, catalog, store, _ = world
    clock = SettableClock(0.0)
    queued = _queue(world, clock)
    job = catalog.claim_job("runner-a", LEASE_S, clock())
    config, _, _, embedder = world
    raw = read_raw(store, TENANT, DOCUMENT, 1)
    path = config.home / "copy.md"
    path.write_bytes(raw.content)
    from citadel.ingest.sources import AclSpec, SourceFile

    Ingestor(catalog, embedder, config).ingest(TENANT, [SourceFile(path, DOCUMENT, raw.key)],
                                               AclSpec(documents={DOCUMENT: ("staff",)}), job_id=job.job_id,
                                               versions={DOCUMENT: 1})  # published, then "killed"
    chunks_after_publish = catalog.manifest(TENANT, DOCUMENT, 1)
    clock.now += LEASE_S + 1
    assert _runner(world, "runner-b", clock).run_once() == queued.job_id
    finished = catalog.get_job(queued.job_id)
    assert finished["status"] == "succeeded" and finished["report"]["files"][0]["status"] == "unchanged"
    assert catalog.manifest(TENANT, DOCUMENT, 1) == chunks_after_publish
    assert read_raw(store, TENANT, DOCUMENT, 1).content == TEXT.encode()  # version 1's raw file stays


def test_an_identical_upload_ends_unchanged_and_keeps_no_orphan_raw_file(world):
    _, catalog, store, _ = world
    clock = SettableClock(0.0)
    runner = _runner(world, "runner-a", clock)
    _queue(world, clock)
    runner.run_once()
    again = _queue(world, clock)
    assert again.version == 2  # reserved, though the content turns out the same
    runner.run_once()
    assert catalog.get_job(again.job_id)["report"]["files"][0]["status"] == "unchanged"
    assert store.list_prefix(version_prefix(TENANT, DOCUMENT, 2)) == []
    assert store.list_prefix(version_prefix(TENANT, DOCUMENT, 1)) != []


def test_a_job_whose_raw_file_never_arrived_fails_with_a_reason(world):
    _, catalog, _, _ = world
    clock = SettableClock(0.0)
    spec = UploadSpec("lost.md", ("staff",), TrustedFields(), 10, "admin")
    queued = catalog.queue_ingest_job(TENANT, "lost", spec.to_dict(), "uploader", LEASE_S, clock())
    runner = _runner(world, "runner-a", clock)
    assert runner.run_once() is None  # the uploader's lease still holds it
    clock.now += LEASE_S + 1  # the uploader died before storing the file
    assert runner.run_once() == queued.job_id
    job = catalog.get_job(queued.job_id)
    assert (job["status"], job["report"]["code"]) == ("failed", "raw_missing")


def test_a_failing_attempt_is_retried_then_the_job_fails_with_its_reason(world):
    config, catalog, store, embedder = world
    clock = SettableClock(0.0)
    queued = _queue(world, clock)

    class Broken:
        def ingest(self, *args, **kwargs):
            raise RuntimeError("embedding server down")

    settings = JobsConfig(lease_s=LEASE_S, poll_s=0.01, max_attempts=2)
    runner = JobRunner(catalog, store, Engines(lambda progress: Broken()), settings, config.home / "jobs",
                       owner="runner-a", clock=clock, heartbeat=False)
    assert runner.run_once() == queued.job_id
    job = catalog.get_job(queued.job_id)
    assert (job["status"], job["state"], job["progress"]["error"]) == ("queued", "queued", "embedding server down")
    assert runner.run_once() == queued.job_id
    job = catalog.get_job(queued.job_id)
    assert (job["status"], job["attempts"], job["report"]["error"]) == ("failed", 2, "embedding server down")


def _publishes(catalog) -> int:
    return sum(1 for row in catalog.audit_log(TENANT) if row["action"] == "publish")


def test_ray_data_parse_workers_read_an_uploads_raw_key_from_the_store(world):
    """The Ray engine's records name an upload by its raw key (not a temporary copy), so a dead letter
    names a file a replay can read back; the parse stage (no Ray needed) reads it from the store."""
    from indexing.records import records_from_jobs
    from indexing.stages import ParseChunkStage

    config, _, store, _ = world
    key = store_raw(store, TENANT, DOCUMENT, 2, TEXT.encode(), ".md")
    source = StoredRawFile(store, key, DOCUMENT)
    records, acl = records_from_jobs([TenantSources(TENANT, (source,), AclSpec.from_groups(["staff"]),
                                                    {DOCUMENT: 2})])
    rows = ParseChunkStage(config, VersionSnapshot({}), acl)(records).to_pylist()
    assert {(row["source"], row["status"], row["version"]) for row in rows} == {(key, "published", 2)}
    assert "The hotel limit is 220 USD per night." in " ".join(row["text"] for row in rows)


def test_only_a_documents_own_raw_key_is_read_from_the_store():
    key = raw_key(TENANT, DOCUMENT, 3, b"x", ".md")
    assert stored_version(TENANT, DOCUMENT, key) == 3
    assert stored_version("other", DOCUMENT, key) is None  # another tenant's letter cannot name it
    assert stored_version(TENANT, "hotels", key) is None
    assert stored_version(TENANT, DOCUMENT, f"/srv/{key}") is None  # a path on disk stays a path
    assert stored_version(TENANT, DOCUMENT, key.replace("v3", "v0")) is None
    assert stored_version(TENANT, DOCUMENT, f"raw/{TENANT}/{DOCUMENT}/v3/notahash.md") is None


def test_the_runner_moves_tiers_every_interval_between_jobs(world):
    """`index.tier_check_interval_s`: the loop runs its tier moves one interval after it starts and every
    interval after (on the runner's clock); 0 never."""
    import time

    config, catalog, store, embedder = world
    clock, checks = SettableClock(1_000.0), []
    settings = JobsConfig(lease_s=LEASE_S, poll_s=0.01)
    runner = JobRunner(catalog, store, Engines(lambda progress: Ingestor(catalog, embedder, config)), settings,
                       config.home / "jobs", clock=clock, heartbeat=False, idle_backoff=False,
                       tier_moves=lambda now: checks.append(now) or [], tier_check_interval_s=60)

    def checked(count: int) -> list[float]:
        deadline = time.monotonic() + 5
        while len(checks) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)  # and no more than that
        return checks

    runner.start()
    try:
        assert checked(0) == []
        clock.now += 60
        assert checked(1) == [1_060.0]
        clock.now += 59
        assert checked(1) == [1_060.0]
        clock.now += 1
        assert checked(2) == [1_060.0, 1_120.0]
    finally:
        runner.stop()
    off = JobRunner(catalog, store, Engines(lambda progress: Ingestor(catalog, embedder, config)), settings,
                    config.home / "jobs", tier_moves=lambda now: checks.append(now) or [], tier_check_interval_s=0)
    assert off.check_tiers() == 0 and len(checks) == 2
