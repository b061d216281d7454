"""The drill catalog run for real over HTTP against the API served by uvicorn on 127.0.0.1 (fused
services in process, fault injection on): each drill's fault goes through the admin API, its
traffic is real requests with minted user contexts, and its verdict, report and timeline PNG are
written. The phases are shortened; the catalog's own lengths run in `citadel drill run --all`.

Replica and node kills end a process, so they are drilled against Ray Serve on the local cluster
(the closing figures), not in this test's own process; here the node kill without a node killer is
reported `skipped` with its reason."""

from __future__ import annotations

import concurrent.futures
import json

import pytest

from citadel.config import ResilienceConfig
from loadtests.drills.run import run_drill, run_many
from loadtests.drills.scenario import find_scenario
from loadtests.population import LoadSettings, Workload
from tests.integration.conftest import FAST_CATALOG_BREAKER, METRICS_TOKEN, make_home
from tests.live_server import LiveServer

QUESTIONS = ["What is the hotel limit per night?", "What is the hotel limit per night in London?",
             "What is the meal allowance on business trips?"]
WORKLOAD = Workload.from_dict({"tenants": [{"tenant": "acme", "group_sets": [["staff"], ["staff", "exec"]],
                                            "questions": QUESTIONS}], "users_per_tenant": 20})
SHORT = {"before_s": 1.5, "fault_s": 5.0, "after_s": 3.0}


@pytest.fixture(scope="module")
def drill_api(tmp_path_factory):
    """A home with Acme ingested and fault injection on, served on loopback; (home, settings)."""
    from citadel.identity.keys import current_service_key
    from serving.http.api import create_api
    from serving.services.compose import build_services

    # back-to-back drill traffic is far over a real user's daily budget
    home = make_home(tmp_path_factory.mktemp("drills") / "home", CITADEL_SERVING__FAULT_INJECTION="true",
                     CITADEL_STATE__BUDGET_REQUESTS_PER_DAY="10000000", CITADEL_STATE__BUDGET_COST_PER_DAY="1000000",
                     CITADEL_RESILIENCE__BREAKERS=FAST_CATALOG_BREAKER)
    key = current_service_key(home.config.service_keys_path, "app", create=True)
    app = create_api()
    app.state.services = build_services(home.config)
    app.state.executor = concurrent.futures.ThreadPoolExecutor(8)
    try:
        with LiveServer(app) as server:
            yield home, LoadSettings(server.url, "app", home.service_token, key.kid, key.secret,
                                     audience=home.config.identity.audience, admin_token=home.admin_token,
                                     workload=WORKLOAD, seed=3)
    finally:
        app.state.services.admin.wait_for_jobs(30)
        app.state.executor.shutdown(wait=True)


def _short(name: str, **load):
    scenario = find_scenario(name)
    return scenario.model_copy(update={"load": scenario.load.model_copy(update={**SHORT, **load})})


@pytest.mark.slow
def test_permission_store_down_fails_closed_with_no_passage_and_returns(drill_api, tmp_path):
    home, settings = drill_api
    report = run_drill(_short("permissions-down", after_s=8.0), settings, tmp_path / "d")
    checks = {c["check"]: c for c in report["checks"]}
    assert report["verdict"] == "pass", json.dumps(report["checks"])
    assert checks["passages returned in the window (leaks)"]["measured"] == 0
    inside = [row for row in report["timeline"] if report["fault"]["start_s"] + 1 < row["t_s"] < report["fault"]["end_s"] - 1]
    assert inside and all(row["failures_5xx"] == row["requests"] for row in inside)  # every one a 503
    assert json.loads((tmp_path / "d" / "report.json").read_text())["verdict"] == "pass"
    assert (tmp_path / "d" / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# The generator's breaker judges calls as they complete, over a window that still holds the fast
# calls from before the fault: it trips once slow calls pass 5% of that window, at the latest on the
# first slow completion after the window has emptied of fast calls (window + one slow call). The
# fault lasts that long and a few seconds more, so fallback answers land inside it on any machine
# (8 s was enough only where the window's fast calls were few).
_GENERATOR = ResilienceConfig().breakers["generator"]
_SLOW_GENERATOR_FAULT_S = _GENERATOR.window_s + find_scenario("slow-generator").fault.spec["latency_ms"] / 1000 + 3.0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["redis-down", "slow-generator", "retry-storm"])
def test_degrading_drills_keep_answers_flowing(drill_api, tmp_path, name):
    home, settings = drill_api
    load = {"fault_s": _SLOW_GENERATOR_FAULT_S} if name == "slow-generator" else {}
    report = run_drill(_short(name, **load), settings, tmp_path / name, metrics_token=METRICS_TOKEN)
    assert report["verdict"] == "pass", json.dumps(report["checks"])
    allowed = {"200", "503"} if name == "retry-storm" else {"200"}  # the storm's injected failures are 503s
    assert report["total"]["requests"] > 20 and set(report["statuses"]) <= allowed, report["statuses"]


def test_a_fault_on_a_stage_the_deployment_lacks_is_refused_and_its_drill_skipped(drill_api, tmp_path):
    """This home has no reranker (answer.reranker none, the default): every answer already carries
    rerank_skipped, so a reranker-down drill there would pass while testing nothing."""
    import httpx

    home, settings = drill_api
    admin = {"authorization": f"Bearer {settings.admin_token}"}
    listed = httpx.get(f"{settings.url}/v1/admin/faults", headers=admin).json()
    assert "reranker" not in listed["stages"] and {"retriever", "generator", "cache"} <= set(listed["stages"])
    refused = httpx.put(f"{settings.url}/v1/admin/faults/reranker", json={"error_rate": 1.0}, headers=admin)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "stage_not_deployed", refused.text
    report = run_drill(_short("reranker-down"), settings, tmp_path / "r")
    assert report["verdict"] == "skipped" and "reranker" in report["reason"], report
    assert "timeline" not in report  # skipped before any traffic


@pytest.mark.slow
def test_a_dead_letter_backlog_is_dead_lettered_while_queries_go_on(drill_api, tmp_path):
    home, settings = drill_api
    scenario = _short("dead-letter-backlog")
    scenario = scenario.model_copy(update={"fault": scenario.fault.model_copy(update={"documents": 4})})
    report = run_drill(scenario, settings, tmp_path / "dl")
    assert report["verdict"] == "pass", json.dumps(report["checks"])
    assert [u["job_status"] for u in report["fault"]["uploads"]] == ["partial"] * 4


def test_a_node_kill_without_a_node_killer_is_skipped_with_its_reason(tmp_path):
    settings = LoadSettings("http://127.0.0.1:9", "app", "t", "k", "00", workload=WORKLOAD)
    table = run_many(["node-kill"], settings, tmp_path, None, None, log=lambda _: None)
    [row] = table["drills"]
    assert row["verdict"] == "skipped" and "node killer" in row["reason"] and table["passed"]


@pytest.mark.slow
def test_citadel_drill_run_end_to_end_leaves_nothing_running(drill_api, tmp_path):
    """The CLI with the home's local app and admin (what `citadel up` provisions) and a scenario file
    of one's own: the table of verdicts with the capacity model's prediction, and no process left."""
    import psutil
    import yaml
    from typer.testing import CliRunner

    from citadel.cli.main import app
    from serving.ray.launcher import ensure_local_identity

    home, settings = drill_api
    ensure_local_identity(home.config)
    scenario = _short("redis-down", before_s=2.0, fault_s=3.0, after_s=2.0).model_dump(mode="json")
    path = tmp_path / "my-drill.yaml"
    path.write_text(yaml.safe_dump({**scenario, "name": "my-drill"}))
    workload = tmp_path / "workload.json"
    workload.write_text(json.dumps({"tenants": [{"tenant": "acme", "group_sets": [["staff"]], "questions": QUESTIONS}]}))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["drill", "run", str(path), "--url", settings.url, "--home", str(home.config.home),
                                      "--workload", str(workload), "--out", str(out), "--json"],
                                env={"CITADEL_HOME": str(home.config.home)})
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)["drills"]
    assert row["drill"] == "my-drill" and row["verdict"] == "pass"
    assert row["prediction"]["p95_ms"] > 0 and "p95_error_pct" in row["prediction"]
    assert (out / "my-drill" / "timeline.png").exists()
    children = [p for p in psutil.Process().children(recursive=True) if "loadtests" in " ".join(p.cmdline())]
    assert children == []


def test_drills_refuse_a_remote_url_unless_told_and_an_unknown_drill(tmp_path, capsys):
    from loadtests.drills.run import main

    settings = tmp_path / "settings.json"
    settings.write_text(LoadSettings("http://10.20.30.40:8000", "app", "t", "k", "00", workload=WORKLOAD).to_json())
    assert main(["--settings", str(settings), "--scenario", "redis-down", "--out", str(tmp_path / "o")]) == 2
    assert "not a loopback address" in capsys.readouterr().err
    settings.write_text(LoadSettings("http://127.0.0.1:9", "app", "t", "k", "00", workload=WORKLOAD).to_json())
    assert main(["--settings", str(settings), "--scenario", "meteor-strike", "--out", str(tmp_path / "o")]) == 2
    assert "unknown drill" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # refused before anything ran
