"""An orchestrator replica killed between two steps of an agentic run (split topology, local Ray on
127.0.0.1): the run finishes on a live replica, every step runs once, and the event log has each
seq once and one final.

How: the app is deployed split, with two orchestrator replicas and a 3 s run lease. Every Ray process
inherits the crash-point environment (it is set before Ray starts), but only the orchestrator
replicas drive runs, so only they pass `AFTER_STEP` (citadel/resilience/crash_points.py). The first
replica to record a step writes its pid to the marker file and pauses; the test SIGKILLs that pid
(a Ray worker of the instance this test started). The gateway's call fails, the run's lease
expires, the gateway's adopter starts the run again on a live orchestrator replica, which passes the
point without pausing (the marker exists) and continues from the last recorded step.

Counting executions: while the point is armed, each pass appends `<pid> <point> <run> <step>` to a
ledger file. The orchestrator calls its hook once per step it executed and recorded, so a step run
again after the resume would appear twice. `max_parallel_steps` is 1, so no step is in flight when
the replica pauses (an unrecorded step in flight would legitimately run again).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest

pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")
psutil = pytest.importorskip("psutil")

from citadel.config import load_config  # noqa: E402
from citadel.resilience.crash_points import AFTER_STEP, LEDGER_ENV, MARKER_ENV, PAUSE_AT_ENV  # noqa: E402
from tests.integration.conftest import make_home  # noqa: E402
from tests.redis_server import _free_port  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]
# Two independent parts: the rules planner makes two search steps (s1, s2).
QUESTION = "Who approves expense reports over 2,000 USD and how long must passwords be?"
LEASE_TTL_S = 3
PAUSE_TIMEOUT_S = 60.0
FINISH_TIMEOUT_S = 60.0
POLL_S = 0.25


def test_the_after_step_point_pauses_once_and_ledgers_every_pass(monkeypatch, tmp_path):
    """No Ray: the hook the orchestrator calls after each recorded step (the drill below relies on it)."""
    from citadel.resilience import crash_points

    crash_points.after_step("r", "s1")  # unarmed: returns at once
    marker, ledger = tmp_path / "paused", tmp_path / "ledger"
    monkeypatch.setenv(PAUSE_AT_ENV, AFTER_STEP)
    monkeypatch.setenv(MARKER_ENV, str(marker))
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    monkeypatch.setattr(crash_points, "MAX_PAUSE_S", 0.3)
    with pytest.raises(RuntimeError, match="nobody killed"):
        crash_points.after_step("r", "s1")
    assert marker.read_text() == str(os.getpid())
    crash_points.after_step("r", "s2")  # the marker exists: passed without pausing
    assert _ledger(ledger, "r") == [(os.getpid(), "s1"), (os.getpid(), "s2")]


def test_split_app_has_an_orchestrator_deployment_and_fused_does_not(tmp_path):
    """Serve's own graph walk of the built app (no cluster needed)."""
    import ray
    from ray.serve._private.build_app import build_app

    from serving.ray.app import build_app_for

    config = load_config(environ={"CITADEL_ANSWER__CONFIRM": "false", "CITADEL_HOME": str(tmp_path)})
    for topology, ingress, has_orchestrator in (("split", "gateway", True), ("fused", "fused", False)):
        config.serving.topology = topology
        built = build_app(build_app_for(config), name="citadel")
        names = {d.name for d in built.deployments}
        assert ("orchestrator" in names) is has_orchestrator, (topology, names)
        assert built.ingress_deployment_name == ingress
    assert not ray.is_initialized()


@pytest.fixture
def split_app(tmp_path, monkeypatch):
    from ray import serve

    from cluster.ray_local import local_ray
    from serving.ray.local import deploy

    marker, ledger = tmp_path / "paused", tmp_path / "steps.ledger"
    # Set before Ray starts: every Ray process (and so every replica) inherits them.
    monkeypatch.setenv(PAUSE_AT_ENV, AFTER_STEP)
    monkeypatch.setenv(MARKER_ENV, str(marker))
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    home = make_home(tmp_path / "home", CITADEL_SERVING__TOPOLOGY="split",
                     CITADEL_AGENT__LEASE_TTL_S=str(LEASE_TTL_S), CITADEL_AGENT__MAX_PARALLEL_STEPS="1")
    config = home.config
    config.serving.port = _free_port()
    config.ingest_pipeline.ray_num_cpus = 2
    config.ingest_pipeline.ray_object_store_mb = 200
    config.serving.deployments["orchestrator"] = config.serving.deployments["orchestrator"].model_copy(
        update={"min_replicas": 2, "max_replicas": 2})
    with local_ray(config.ingest_pipeline):
        try:
            url = deploy(config)
            with httpx.Client(base_url=url, timeout=30.0) as client:
                yield home, client, marker, ledger
        finally:
            serve.shutdown()


def _wait(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(POLL_S)
    raise AssertionError(f"{what} not within {timeout_s:g} s")


def _orchestrator_replica(pid: int) -> psutil.Process:
    """The paused process: one this test started (a descendant), and an orchestrator replica."""
    ours = {p.pid: p for p in psutil.Process().children(recursive=True)}
    assert pid in ours, f"pid {pid} from the marker is not a process of this test's Ray instance"
    process = ours[pid]
    assert "orchestrator" in " ".join(process.cmdline()), process.cmdline()
    return process


def _ledger(path, run_id: str) -> list[tuple[int, str]]:
    """(pid, step id) for each pass of this run through the armed point, in order."""
    passes = []
    for line in path.read_text().splitlines():
        pid, point, run, step = line.split()
        assert point == AFTER_STEP
        if run == run_id:
            passes.append((int(pid), step))
    return passes


def test_a_killed_orchestrator_replica_s_run_continues_on_another_and_runs_each_step_once(split_app):
    home, client, marker, ledger = split_app
    started = time.monotonic()
    headers = home.headers()
    created = client.post("/v1/conversations", headers=headers)
    assert created.status_code == 201, created.text
    conversation = created.json()["conversation_id"]
    posted = client.post(f"/v1/conversations/{conversation}/messages", json={"content": QUESTION}, headers=headers)
    assert posted.status_code == 202, posted.text
    run_id = posted.json()["run_id"]

    _wait(marker.exists, PAUSE_TIMEOUT_S, "an orchestrator replica pausing after a step")
    killed = int(_wait(lambda: marker.read_text().strip(), 5, "the marker's pid"))
    replica = _orchestrator_replica(killed)
    assert _ledger(ledger, run_id) == [(killed, "s1")]
    assert client.get(f"/v1/runs/{run_id}", headers=headers).json()["status"] == "running"
    os.kill(killed, signal.SIGKILL)
    replica.wait(timeout=30)

    def finished():
        run = client.get(f"/v1/runs/{run_id}", headers=home.headers()).json()
        return run if run["status"] in ("succeeded", "stopped") else None

    run = _wait(finished, FINISH_TIMEOUT_S, "the run finishing after the kill")
    assert run["path"] == "agentic"
    assert [(s["id"], s["status"]) for s in run["steps"] if s["id"].startswith("step:")] == [
        ("step:s1", "ok"), ("step:s2", "ok")]

    # Each step executed once; the second by another process (a live or restarted replica).
    passes = _ledger(ledger, run_id)
    assert Counter(step for _, step in passes) == {"s1": 1, "s2": 1}, passes
    assert passes[0] == (killed, "s1") and passes[1][0] != killed

    response = client.get(f"/v1/runs/{run_id}/events", headers={**home.headers(), "accept": "application/json"})
    assert response.status_code == 200, response.text
    events = response.json()
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    finals = [e for e in events if e["type"] == "final"]
    assert len(finals) == 1 and events[-1] is finals[0]
    progress = Counter((e["data"]["stage"], e["data"].get("step_id")) for e in events if e["type"] == "progress")
    assert progress[("started", None)] == progress[("route", None)] == progress[("plan", None)] == 1
    assert progress[("step", "s1")] == progress[("step", "s2")] == 1
    final = finals[0]["data"]
    assert final["steps"] == 2 and final["path"] == "agentic"
    assert "finance controller" in final["answer"] and "16 characters" in final["answer"]
    print(f"\nkilled pid {killed}; resumed in pid {passes[1][0]}; {time.monotonic() - started:.1f} s from the post")
