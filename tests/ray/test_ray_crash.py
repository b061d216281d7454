"""Crash mid-publish: a `citadel ingest` on Ray Data killed with SIGKILL after its segment is built and
verified but before the catalog's pointer switch leaves the old version served and nothing partial
visible; the next run recovers (publishes, sweeps the dead job's leftovers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from ray_helpers import GOOD, OBJECT_STORE_MB, RAY_CPUS, run_pipeline

pytest.importorskip("ray")

from citadel.resilience.crash_points import BEFORE_PUBLISH, MARKER_ENV, PAUSE_AT_ENV  # noqa: E402
from citadel.ingest.sources import AclSpec, discover  # noqa: E402
from citadel.types import Principal  # noqa: E402
from indexing.records import records_from_paths  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
STAFF = Principal("t", "s", frozenset({"staff"}))
PAUSE_TIMEOUT_S = 180


def _start_paused_ingest(home, docs, marker, log):
    env = {**os.environ, "CITADEL_HOME": str(home), "CITADEL_EMBEDDING__BACKEND": "hash",
           "CITADEL_INGEST_PIPELINE__ENGINE": "ray", "CITADEL_INGEST_PIPELINE__RAY_NUM_CPUS": str(RAY_CPUS),
           "CITADEL_INGEST_PIPELINE__RAY_OBJECT_STORE_MB": str(OBJECT_STORE_MB),
           PAUSE_AT_ENV: BEFORE_PUBLISH, MARKER_ENV: str(marker)}
    command = [sys.executable, "-m", "citadel.cli.main", "ingest", "--tenant", "t", "--groups", "staff", str(docs)]
    # Its own session, so the kill below reaches the driver's process group and nothing of ours.
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_pause(process, marker, log_path):
    deadline = time.monotonic() + PAUSE_TIMEOUT_S
    while not marker.exists():
        if process.poll() is not None:
            pytest.fail(f"ingest exited ({process.returncode}) before the pause:\n{log_path.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"ingest never reached {BEFORE_PUBLISH}:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.2)


def _kill_job(process):
    """SIGKILL the driver's process group, then any descendant (Ray's head and workers) still alive."""
    descendants = psutil.Process(process.pid).children(recursive=True)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    for child in descendants:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(descendants, timeout=30)


def test_crash_mid_publish_leaves_old_version_served(make_runtime, tmp_path):
    runtime = make_runtime()
    docs = tmp_path / "docs"
    docs.mkdir()
    policy = docs / "leave.md"
    policy.write_text(GOOD)
    acl = AclSpec.from_groups(["staff"])
    runtime.ingestor().ingest("t", discover([docs]), acl)  # version 1, in-process
    served = runtime.catalog.published_segment("t")

    policy.write_text(GOOD.replace("25 days", "30 days"))
    marker, log_path = tmp_path / "paused", tmp_path / "ingest.log"
    with open(log_path, "w") as log:
        process = _start_paused_ingest(runtime.config.home, docs, marker, log)
        try:
            _wait_for_pause(process, marker, log_path)
        finally:
            _kill_job(process)

    partition_root = runtime.config.partitions_dir / "t"
    built = {p.name for p in partition_root.iterdir() if p.is_dir()} - {served}
    assert len(built) == 1, "the killed job had built (and verified) its segment"
    assert runtime.catalog.published_segment("t") == served
    record = runtime.catalog.get_document("t", "leave")
    assert (record.published_version, record.latest_version) == (1, 1)
    assert runtime.catalog.manifest("t", "leave", 2) == []
    passages = runtime.retriever.retrieve(STAFF, "annual leave days").passages
    assert passages and all("25 days" in p.text and p.version == 1 for p in passages)
    staging = runtime.config.home / "staging"
    abandoned = [p.name for p in staging.iterdir()]
    assert len(abandoned) == 1

    # The next run, on a fresh local Ray instance, publishes version 2 and sweeps the leftovers.
    from cluster.ray_local import local_ray

    runtime.config.ingest_pipeline.ray_num_cpus = RAY_CPUS
    runtime.config.ingest_pipeline.ray_object_store_mb = OBJECT_STORE_MB
    with local_ray(runtime.config.ingest_pipeline):
        report = run_pipeline(runtime, records_from_paths("t", [docs]), acl)
    assert report.status == "succeeded" and report.files[0].version == 2
    assert runtime.catalog.get_job(abandoned[0])["status"] == "failed"
    assert list(staging.iterdir()) == []
    assert {p.name for p in partition_root.iterdir() if p.is_dir()} == {served, report.segment_id}
    passages = runtime.retriever.retrieve(STAFF, "annual leave days").passages
    assert passages and all("30 days" in p.text and p.version == 2 for p in passages)
