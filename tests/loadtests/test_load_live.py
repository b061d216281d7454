"""A real, short locust run (loadtests/run_load.py) against the API served over HTTP on 127.0.0.1 by
uvicorn, in process (fused services, no Ray): the reports are written, retrieve and answer see no
errors, agentic runs are followed to their event stream's end, the admin uploads once or twice, and
no process of locust's group is left, also when the wall-clock limit has to end it."""

from __future__ import annotations

import concurrent.futures
import socket
import time

import psutil
import pytest

from loadtests.population import LoadSettings, Workload
from loadtests.run_load import run_load
from tests.integration.conftest import make_home
from tests.live_server import LiveServer

RUN_S = 25
USERS = 4
QUESTIONS = ["What is the hotel limit per night?", "What is the hotel limit per night in London?",
             "What is the meal allowance on business trips?"]
WORKLOAD = Workload.from_dict({"tenants": [{"tenant": "acme", "group_sets": [["staff"], ["staff", "exec"]],
                                            "questions": QUESTIONS}], "users_per_tenant": 50})


@pytest.fixture
def live_api(tmp_path):
    """A home with Acme ingested (tests/integration/conftest.py) and its API on 127.0.0.1; yields
    (home, URL); afterwards the uploads' jobs and the runs are waited for."""
    from serving.http.api import create_api
    from serving.services.compose import build_services

    home = make_home(tmp_path / "home")
    app = create_api()
    app.state.services = build_services(home.config)
    app.state.executor = concurrent.futures.ThreadPoolExecutor(4)
    try:
        with LiveServer(app) as server:
            yield home, server.url
    finally:
        app.state.services.admin.wait_for_jobs(30)
        app.state.services.runs.wait_for_runs(30)
        app.state.executor.shutdown(wait=True)


@pytest.mark.slow
def test_a_bounded_locust_run_against_the_api(live_api, tmp_path):
    from citadel.identity.keys import current_service_key

    home, url = live_api
    key = current_service_key(home.config.service_keys_path, "app", create=True)
    out = tmp_path / "load"
    settings = LoadSettings(url, "app", home.service_token, key.kid, key.secret, audience=home.config.identity.audience,
                            admin_token=home.admin_token, workload=WORKLOAD, seed=1, run_wait_s=20)
    summary = run_load(settings, "step", RUN_S, USERS, out)
    print(summary)
    assert not summary["timed_out"] and summary["exit_code"] == 0 and summary["wall_s"] < RUN_S + 30
    for name in ("locust_stats.csv", "locust_stats_history.csv", "locust_failures.csv", "report.html",
                 "summary.json"):
        assert (out / name).stat().st_size > 0, name
    endpoints = summary["endpoints"]
    for name in ("POST /v1/retrieve", "POST /v1/answer"):
        assert endpoints[name]["requests"] > 0 and endpoints[name]["failures"] == 0, endpoints
    upload = endpoints["POST /v1/admin/tenants/[tenant]/documents"]  # the one admin, at its low rate
    assert 1 <= upload["requests"] <= 2 and upload["failures"] == 0
    assert endpoints["RUN agentic run"]["requests"] > 0
    assert summary["total"]["requests"] > 20 and summary["total"]["rps"] > 0
    assert all(p in summary["total"] for p in ("p50", "p95", "p99"))
    # no process of locust's group (its pgid is its pid) is left
    left = [p.pid for p in psutil.process_iter(["pid"]) if _group(p.pid) == summary["pid"]]
    assert left == [] and not psutil.pid_exists(summary["pid"])


@pytest.mark.slow
def test_citadel_load_runs_the_home_s_local_app_against_a_loopback_url(live_api, tmp_path):
    """The CLI end to end: the local app's token and key and the local admin's token from the home
    (what `citadel up` provisions), a spike for 15 s, the summary printed, and nothing left running."""
    import json

    from typer.testing import CliRunner

    from citadel.cli.main import app
    from serving.ray.launcher import ensure_local_identity

    home, url = live_api
    ensure_local_identity(home.config)
    workload = tmp_path / "workload.json"
    tenants = [{"tenant": "acme", "group_sets": [["staff"]], "questions": QUESTIONS}]
    workload.write_text(json.dumps({"tenants": tenants}))
    out = tmp_path / "cli-load"
    result = CliRunner().invoke(app, ["load", "--url", url, "--shape", "spike", "--minutes", "0.25", "--users", "3",
                                      "--home", str(home.config.home), "--workload", str(workload), "--out", str(out),
                                      "--json"], env={"CITADEL_HOME": str(home.config.home)})
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary == json.loads((out / "summary.json").read_text()) and (out / "report.html").exists()
    for name in ("POST /v1/retrieve", "POST /v1/answer"):
        assert endpoints_ok(summary, name)
    assert summary["endpoints"]["POST /v1/admin/tenants/[tenant]/documents"]["failures"] == 0
    children = [p for p in psutil.Process().children(recursive=True)
                if any("locust" in part or "loadtests" in part for part in _cmdline(p))]
    assert children == [] and not psutil.pid_exists(summary["pid"])


@pytest.mark.slow
def test_the_wall_clock_limit_ends_locusts_process_group(tmp_path):
    """A run whose wall-clock limit passes before its shape ends: only locust's group is
    ended, and nothing of it is left. (Nothing listens on the port: every request fails fast.)"""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings = LoadSettings(url, "app", "token", "hs-1", "00" * 32, workload=WORKLOAD)
    started = time.monotonic()
    summary = run_load(settings, "step", 60, 2, tmp_path / "load", wall_limit_s=6)
    assert summary["timed_out"] and time.monotonic() - started < 30
    assert not psutil.pid_exists(summary["pid"])
    assert [p.pid for p in psutil.process_iter(["pid"]) if _group(p.pid) == summary["pid"]] == []


def endpoints_ok(summary: dict, name: str) -> bool:
    entry = summary["endpoints"].get(name, {})
    return entry.get("requests", 0) > 0 and entry.get("failures") == 0


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _group(pid: int) -> int | None:
    import os

    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None
