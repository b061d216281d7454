"""The `capacity` typer app through CliRunner: plan, simulate and calibrate, tables and --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from capacity.calibrate import QUICK_SIZES, rates_from_benchmarks, run_calibration
from citadel.cli.capacity_cmd import app

REPO = Path(__file__).resolve().parents[3]
AGENTIC = REPO / "cluster" / "workloads" / "agentic-400m.yaml"
REPLICA_DOWN = REPO / "cluster" / "scenarios" / "replica-down.yaml"
runner = CliRunner()


def _json(args: list[str]) -> dict:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_plan_json_carries_the_totals() -> None:
    plan = _json(["plan", "--workload", str(AGENTIC), "--json"])
    assert {"hnsw", "diskann", "exact", "total"} <= set(plan["ram_bytes"])
    assert plan["ssd_bytes"] > 0
    assert {"ingest", "query"} <= set(plan["gpus"])
    assert {"shards", "per_shard", "total"} <= set(plan["replicas"])
    assert plan["error_budget"]["failed_answers_per_month"] == pytest.approx(60_000)
    assert 0.9e12 <= plan["ram_bytes"]["total"] <= 1.2e12


def test_plan_table_for_humans() -> None:
    result = runner.invoke(app, ["plan", "--workload", str(AGENTIC)])
    assert result.exit_code == 0, result.output
    assert "Index tiers" in result.output and "runs out first" in result.output


def test_plan_sizes_the_people_beside_the_machines() -> None:
    people = _json(["plan", "--workload", str(AGENTIC), "--json"])["people"]
    deal_desk = people["teams"]["deal-desk"]
    assert deal_desk["approvals_per_day"] == pytest.approx(400)  # 800k runs x 0.0005
    assert deal_desk["review_tasks"]["honeypots"] == pytest.approx(4)
    assert deal_desk["saturation_multiplier"] == pytest.approx(1 / deal_desk["utilisation"])
    assert people["first_team"]["name"] == "deal-desk" and people["team_before_machines"]
    assert {"retriever_replicas", "query_gpus", "generator_quota"} == set(people["machines"])
    table = runner.invoke(app, ["plan", "--workload", str(REPO / "cluster" / "workloads" / "small-team.yaml")])
    assert table.exit_code == 0, table.output
    assert "People: approvals and review tasks per team" in table.output
    assert "First team: knowledge-owners at 2.00x" in table.output
    assert "First to fall behind: generator_quota (provider quota) at 1.54x" in table.output


def test_plan_writes_pngs(tmp_path: Path) -> None:
    plan = _json(["plan", "--workload", str(AGENTIC), "--json", "--plot", str(tmp_path)])
    assert len(plan["plots"]) == 5
    assert any(path.endswith("capacity-people-vs-load.png") for path in plan["plots"])
    for path in plan["plots"]:
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_json(tmp_path: Path) -> None:
    short = tmp_path / "short.yaml"
    short.write_text(REPLICA_DOWN.read_text(encoding="utf-8").replace("duration_s: 60", "duration_s: 14"),
                     encoding="utf-8")
    result = _json(["simulate", "--scenario", str(short), "--json"])
    assert result["peak_load_qps"] > 400  # the headline policy is the retry storm
    assert result["p99_ms"] > 0
    budget = _json(["simulate", "--scenario", str(short), "--json", "--policy", "one-retry-layer"])
    assert budget["peak_load_qps"] == pytest.approx(209, rel=0.05)


def test_simulate_table_and_bad_policy(tmp_path: Path) -> None:
    table = runner.invoke(app, ["simulate", "--scenario", str(REPO / "cluster/scenarios/slow-provider.yaml")])
    assert table.exit_code == 0 and "latency-breaker" in table.output
    bad = runner.invoke(app, ["simulate", "--scenario", str(REPLICA_DOWN), "--policy", "nope"])
    assert bad.exit_code != 0


def test_calibrate_writes_rates_that_plan_reads(tmp_path: Path) -> None:
    rates_path = tmp_path / "rates.yaml"
    result = runner.invoke(app, ["calibrate", "--out", str(rates_path), "--skip", "embed", "--quick",
                                 "--benchmarks", str(tmp_path / "none")])
    assert result.exit_code == 0, result.output
    assert rates_path.exists()
    plan = _json(["plan", "--workload", str(AGENTIC), "--json", "--rates", str(rates_path)])
    # The calibrated index times plus the fixed Serve hop replace the workload's 12 ms.
    assert 6.0 < plan["replicas"]["search_service_ms"] < 12.0
    unknown = runner.invoke(app, ["calibrate", "--out", str(rates_path), "--skip", "gpu"])
    assert unknown.exit_code != 0


def test_calibration_measures_what_is_installed() -> None:
    result = run_calibration(skip=("embed",), sizes=QUICK_SIZES)
    rates = result["rates"]
    assert rates["exact_scan_vectors_per_s"] > 0
    assert rates["hnsw_search_ms"] > 0  # faiss-cpu is a project dependency
    assert rates["bm25_search_ms"] > 0  # so is tantivy
    assert result["skipped"] == {"embed": "skipped on request"}


def test_calibration_prefers_the_project_hnsw_benchmark(tmp_path: Path) -> None:
    report = {"n": 100_000, "rows": [
        {"path": "raw faiss", "readable": "100%", "qps_cpu_single": 4000.0},
        {"path": "Citadel HNSWIndex", "readable": "100%", "recall_at_10": 0.99, "qps_cpu_single": 2000.0},
        {"path": "Citadel HNSWIndex", "readable": "1%", "qps_cpu_single": 100.0},
    ]}
    (tmp_path / "hnsw.json").write_text(json.dumps(report), encoding="utf-8")
    assert rates_from_benchmarks(tmp_path)["hnsw_search_ms"] == pytest.approx(0.5)
    assert rates_from_benchmarks(tmp_path / "missing") == {}
    result = run_calibration(skip=("embed", "exact", "bm25", "hnsw"), benchmarks_dir=tmp_path)
    assert result["rates"]["hnsw_search_ms"] == pytest.approx(0.5)
    assert result["sources"]["hnsw_search_ms"].endswith("hnsw.json")
