"""Predicted against measured: parsing runs, predicting, calibrating, the CLI table.

The "measured" runs are synthesised from a known model (its own predictions written as locust
summaries), so calibration has a truth to recover; the planner's default model is far from it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from capacity.measured import (
    MeasuredRun,
    ServiceModel,
    attach_prediction,
    compare,
    default_model,
    fit_model,
    load_model,
    mixture_quantile,
    predict,
    users_per_class,
    write_model,
)
from citadel.cli.capacity_cmd import app

TRUTH = ServiceModel(servers=2, retrieve_ms=45.0, answer_ms=180.0, other_ms=8.0, cv=0.8, overhead_ms=3.0)
TOLERANCE_PCT = 25.0
TWO_CORES = {"rates": {"cpu_cores": 2}}
ENDPOINT_NAMES = {"retrieve": "POST /v1/retrieve", "answer": "POST /v1/answer", "other": "GET /v1/runs/[id]/events"}
runner = CliRunner()


def _template(users: int, shape: str = "constant") -> dict:
    """A summary whose endpoints say which user classes ran; its figures are placeholders."""
    entry = {"requests": 100, "failures": 0, "rps": 1.0, "p50": 10.0, "p95": 20.0, "p99": 30.0}
    return {"endpoints": {name: dict(entry) for name in ENDPOINT_NAMES.values()}, "total": dict(entry),
            "users": users, "shape": shape, "run_time_s": 60, "url": "http://127.0.0.1:8000"}


def synthesised_summary(users: int, model: ServiceModel = TRUTH, topology: dict | None = None) -> dict:
    """What locust would have written had the system behaved exactly like `model`."""
    summary = _template(users)
    if topology is not None:
        summary["topology"] = topology
    predicted = predict(MeasuredRun.from_summary(summary, "template"), model)
    seconds = predicted["requests"] / predicted["throughput_rps"]
    summary["endpoints"] = {
        ENDPOINT_NAMES[kind]: {"requests": figures["requests"], "failures": 0, "rps": figures["requests"] / seconds,
                               "p50": figures["p50_ms"], "p95": figures["p95_ms"], "p99": 0.0}
        for kind, figures in predicted["kinds"].items()
    }
    summary["total"] = {"requests": predicted["requests"], "failures": 0, "rps": predicted["throughput_rps"],
                        "p50": predicted["p50_ms"], "p95": predicted["p95_ms"], "p99": predicted["p99_ms"]}
    return summary


@pytest.fixture(scope="module")
def measured_runs() -> list[MeasuredRun]:
    return [MeasuredRun.from_summary(synthesised_summary(users), f"runs/u{users}/summary.json")
            for users in (4, 16, 24)]


@pytest.fixture(scope="module")
def fitted(measured_runs: list[MeasuredRun]) -> ServiceModel:
    # The third load level is held out. Two servers, as TRUTH: the default would be this machine's cores.
    return fit_model(measured_runs[:2], start=default_model(TWO_CORES))


# ---------------------------------------------------------------- parsing


def test_parses_a_summary_and_classifies_endpoints() -> None:
    summary = _template(8) | {"topology": {"name": "fused", "nodes": 3, "cpus": 3.0, "replicas": {"gateway": 2}}}
    summary["endpoints"]["POST /v1/conversations"] = {"requests": 10, "p50": 5.0, "p95": 9.0, "rps": 0.2}
    run = MeasuredRun.from_summary(summary, "s.json")
    assert run.users == 8 and run.closed_loop and run.cpus() == 3.0
    assert run.kinds() == ["retrieve", "answer", "other"]
    assert run.kind_requests("other") == 110
    assert run.p95_ms == 20.0  # no RUN entry: the aggregate is the request-level p95
    assert run.rps == pytest.approx(3.2)


def test_missing_optional_keys_and_varying_shapes() -> None:
    minimal = {"endpoints": {"POST /v1/retrieve": {"requests": 5, "p50": 8.0, "p95": 27.0}}}
    run = MeasuredRun.from_summary(minimal, "drill.json")
    assert run.users is None and not run.closed_loop and run.topology == {}
    assert run.p95_ms == 27.0
    assert not MeasuredRun.from_summary(_template(8, shape="diurnal"), "d").closed_loop


def test_refuses_a_run_with_no_requests() -> None:
    with pytest.raises(ValueError, match="no HTTP requests"):
        MeasuredRun.from_summary({"endpoints": {}, "total": {}, "users": 8}, "empty.json")
    with pytest.raises(ValueError, match="no HTTP requests"):
        MeasuredRun.from_summary({"endpoints": {"POST /v1/retrieve": {"requests": 0}}}, "zero.json")


def test_agent_run_entries_are_left_out_of_the_request_p95() -> None:
    summary = _template(8)
    summary["endpoints"]["RUN agentic run"] = {"requests": 10, "p50": 3000.0, "p95": 9000.0, "rps": 0.2}
    summary["total"]["p95"] = 8000.0  # locust's aggregate mixes the multi-second runs in
    run = MeasuredRun.from_summary(summary, "s.json")
    assert run.p95_ms == pytest.approx(20.0, rel=0.01)  # rebuilt from the HTTP endpoints
    assert run.agent_requests_per_run() == pytest.approx(10.0)


def test_mixture_quantile_lies_between_its_parts() -> None:
    run = MeasuredRun.from_summary({"endpoints": {
        "POST /v1/retrieve": {"requests": 90, "p50": 10.0, "p95": 20.0},
        "POST /v1/answer": {"requests": 10, "p50": 100.0, "p95": 200.0}}}, "m")
    p95 = mixture_quantile(run.endpoints, 0.95)
    assert 20.0 < p95 < 200.0


def test_users_are_split_as_locust_weights_them() -> None:
    assert users_per_class(18, ["retrieve", "answer", "other"]) == {"retrieve": 10, "answer": 6, "other": 2}
    assert users_per_class(3, ["retrieve", "answer", "other"]) == {"retrieve": 1, "answer": 1, "other": 1}
    assert sum(users_per_class(8, ["retrieve", "answer", "other"]).values()) == 8
    assert users_per_class(5, ["retrieve"]) == {"retrieve": 5}


# ---------------------------------------------------------------- prediction


def test_prediction_is_seeded_fast_and_closed_loop() -> None:
    run = MeasuredRun.from_summary(_template(16), "t")
    started = time.perf_counter()
    first = predict(run, TRUTH)
    assert time.perf_counter() - started < 2.0
    assert predict(run, TRUTH) == first
    assert first["loop"] == "closed" and first["throughput_rps"] != run.rps  # not copied from the run
    # Closed loop: more users, more throughput, never more than the CPUs can serve.
    light = predict(MeasuredRun.from_summary(_template(2), "t"), TRUTH)
    assert light["throughput_rps"] < first["throughput_rps"]
    assert first["utilisation"] <= 1.0


def test_topology_cpus_cap_the_servers() -> None:
    run = MeasuredRun.from_summary(_template(16) | {"topology": {"cpus": 1.0}}, "t")
    one_cpu = predict(run, TRUTH)
    assert one_cpu["servers"] == 1
    assert one_cpu["p95_ms"] > predict(MeasuredRun.from_summary(_template(16), "t"), TRUTH)["p95_ms"]


def test_varying_shapes_are_predicted_open_loop_at_the_measured_rate() -> None:
    run = MeasuredRun.from_summary(_template(16, shape="spike"), "t")
    predicted = predict(run, TRUTH)
    assert predicted["loop"] == "open" and predicted["throughput_rps"] == run.rps
    assert predicted["p95_ms"] > 0


def test_default_model_comes_from_the_planners_rates() -> None:
    defaults = default_model(None)
    measured = default_model({"rates": {"embed_seq_per_s_cpu": 50.0, "hnsw_search_ms": 1.0,
                                        "bm25_search_ms": 2.0, "cpu_cores": 2}})
    assert measured.servers == 2
    # 1000/50 ms per passage x 0.38 for a short query, + HNSW + BM25 + the Serve hop (6 ms).
    assert measured.retrieve_ms == pytest.approx(20.0 * 0.38 + 1.0 + 2.0 + 6.0)
    assert defaults.retrieve_ms == pytest.approx(40.0 * 0.38 + 12.0)
    assert measured.answer_ms > measured.retrieve_ms > measured.other_ms


# ---------------------------------------------------------------- calibration


def test_calibration_brings_p95_within_tolerance_at_two_load_levels(
        measured_runs: list[MeasuredRun], fitted: ServiceModel) -> None:
    rows = compare(measured_runs, default_model(TWO_CORES), fitted,
                   fitted_on=[run.source for run in measured_runs[:2]])
    assert [row["fitted"] for row in rows] == [True, True, False]
    before = [abs(row["before"]["p95_error_pct"]) for row in rows]
    after = [abs(row["after"]["p95_error_pct"]) for row in rows]
    assert all(error > 50.0 for error in before), before  # the planner's belief is far off
    assert all(error <= TOLERANCE_PCT for error in after), after  # held-out level included
    assert all(abs(row["after"]["throughput_error_pct"]) <= TOLERANCE_PCT for row in rows)


def test_calibration_needs_two_constant_runs(measured_runs: list[MeasuredRun]) -> None:
    with pytest.raises(ValueError, match="at least 2 runs"):
        fit_model(measured_runs[:1])
    spike = MeasuredRun.from_summary(_template(16, shape="spike"), "spike")
    with pytest.raises(ValueError, match="varying shapes are skipped"):
        fit_model([measured_runs[0], spike])


def test_model_round_trips_through_yaml(tmp_path: Path, fitted: ServiceModel) -> None:
    path = write_model(fitted, tmp_path / "model.yaml", fitted_on=["a", "b"])
    assert load_model(path) == fitted


def test_attach_prediction_uses_the_calibrated_model_when_there_is_one(tmp_path: Path) -> None:
    summary = synthesised_summary(8)
    default = attach_prediction(summary, None)
    assert default["model"] == "default" and default["p95_ms"] > 0 and default["throughput_rps"] > 0
    assert attach_prediction(summary, tmp_path / "missing.yaml")["model"] == "default"
    path = write_model(TRUTH, tmp_path / "model.yaml")
    calibrated = attach_prediction(summary, path)
    assert calibrated["model"] == "calibrated"
    assert abs(calibrated["p95_error_pct"]) < 1.0 and abs(calibrated["throughput_error_pct"]) < 1.0
    assert set(calibrated) >= {"p95_ms", "throughput_rps", "p95_error_pct", "throughput_error_pct"}
    empty = attach_prediction({"endpoints": {}, "total": {}}, path)
    assert empty["model"] == "calibrated" and "no HTTP requests" in empty["skipped"]


# ---------------------------------------------------------------- the CLI


def _write_runs(directory: Path) -> list[Path]:
    paths = []
    for users in (4, 16):
        path = directory / f"load-u{users}" / "summary.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(synthesised_summary(users)), encoding="utf-8")
        paths.append(path)
    drill = directory / "drill-spike" / "report.json"
    drill.parent.mkdir()
    drill.write_text(json.dumps(synthesised_summary(24) | {"shape": "spike", "drill": "replica-down"}))
    (directory / "rates.yaml").write_text("rates:\n  cpu_cores: 2\n", encoding="utf-8")
    (directory / "empty").mkdir()
    (directory / "empty" / "summary.json").write_text(json.dumps({"endpoints": {}, "total": {}}))
    return paths


def test_cli_calibrate_from_runs_json(tmp_path: Path) -> None:
    _write_runs(tmp_path / "runs")
    model_out = tmp_path / "model.yaml"
    result = runner.invoke(app, ["calibrate", "--runs", str(tmp_path / "runs"), "--model-out", str(model_out),
                                 "--rates", str(tmp_path / "runs" / "rates.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert model_out.is_file() and report["written_to"] == str(model_out)
    assert len(report["fitted_on"]) == 2 and len(report["rows"]) == 3
    assert any("spike" in source for source in report["not_fitted"])
    assert any("empty" in source for source in report["skipped"])
    fitted_rows = [row for row in report["rows"] if row["fitted"]]
    assert all(abs(row["after"]["p95_error_pct"]) <= TOLERANCE_PCT for row in fitted_rows)
    assert report["load_levels_within_tolerance_after"] >= 2
    assert load_model(model_out) == ServiceModel(**report["model"])


def test_cli_calibrate_table_with_holdout(tmp_path: Path) -> None:
    paths = _write_runs(tmp_path / "runs")
    third = tmp_path / "runs" / "load-u24" / "summary.json"
    third.parent.mkdir()
    third.write_text(json.dumps(synthesised_summary(24)), encoding="utf-8")
    result = runner.invoke(app, ["calibrate", *(arg for p in [*paths, third] for arg in ("--runs", str(p))),
                                 "--holdout", "u24", "--model-out", str(tmp_path / "m.yaml"),
                                 "--rates", str(tmp_path / "runs" / "rates.yaml")])
    assert result.exit_code == 0, result.output
    assert "Predicted against measured" in result.output and "after p95" in result.output
    assert "wrote" in result.output


def test_cli_calibrate_refuses_too_few_runs(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(synthesised_summary(4)), encoding="utf-8")
    result = runner.invoke(app, ["calibrate", "--runs", str(path), "--model-out", str(tmp_path / "m.yaml")])
    assert result.exit_code != 0
    assert "at least 2 runs" in result.output



def test_attach_prediction_never_breaks_a_report(tmp_path: Path) -> None:
    broken = tmp_path / "model.yaml"
    broken.write_text("model: [not, a, mapping\n", encoding="utf-8")
    assert "cannot read the model" in attach_prediction(synthesised_summary(4), broken)["skipped"]
    with_runs = _template(8)
    with_runs["endpoints"]["RUN agentic run"] = {"requests": 10, "p50": 3000.0, "p95": 9000.0, "rps": 0.2}
    predicted = attach_prediction(with_runs, None, rates=TWO_CORES)
    assert predicted["loop"] == "closed" and predicted["measured_p95_ms"] == pytest.approx(20.0, rel=0.01)


def test_the_admin_uploader_is_no_user_class() -> None:
    summary = {"endpoints": {"POST /v1/retrieve": {"requests": 100, "p50": 10.0, "p95": 20.0, "rps": 1.6},
                             "POST /v1/admin/tenants/[tenant]/documents": {"requests": 2, "p50": 50.0, "p95": 60.0}},
               "total": {"requests": 102, "p50": 10.0, "p95": 20.0}, "users": 4, "shape": "constant"}
    run = MeasuredRun.from_summary(summary, "s")
    assert run.kinds() == ["retrieve"] and run.requests == 100
    assert predict(run, TRUTH)["kinds"].keys() == {"retrieve"}
