"""Bounds of a load run (loadtests/run_load.py, `citadel load`): loopback unless told otherwise, run
time and users capped, and locust's stats CSV summarised per endpoint."""

from __future__ import annotations

import pytest

from loadtests.population import LoadSettings
from loadtests.run_load import LoadRefused, check_run, is_loopback_url, run_load, summarise


@pytest.mark.parametrize("url, loopback", [
    ("http://127.0.0.1:8000", True), ("http://localhost:8000", True), ("https://127.0.0.9", True),
    ("http://[::1]:8000", True), ("http://10.0.0.1:8000", False), ("http://example.com", False),
    ("http://127.0.0.1.example.com", False), ("ftp://127.0.0.1", False), ("127.0.0.1:8000", False),
])
def test_only_loopback_urls_are_loopback(url, loopback):
    assert is_loopback_url(url) is loopback


def test_a_remote_url_is_refused_unless_allowed(tmp_path):
    settings = LoadSettings("http://192.0.2.10:8000", "app", "tok", "hs-1", "00" * 32)
    with pytest.raises(LoadRefused, match="not a loopback"):
        run_load(settings, "step", 10, 2, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything ran or was written
    check_run("http://192.0.2.10:8000", "step", 10, 2, allow_remote=True)
    with pytest.raises(LoadRefused, match="not an http"):
        check_run("file:///etc/passwd", "step", 10, 2, allow_remote=True)


@pytest.mark.parametrize("shape, run_time_s, users", [("step", 0, 2), ("step", 121 * 60, 2), ("step", 60, 0),
                                                      ("step", 60, 2001), ("sawtooth", 60, 2)])
def test_runs_are_bounded_in_time_and_users(shape, run_time_s, users):
    with pytest.raises(LoadRefused):
        check_run("http://127.0.0.1:8000", shape, run_time_s, users, allow_remote=False)


def test_the_summary_reads_locusts_stats_csv(tmp_path):
    header = ("Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,Min Response Time,"
              "Max Response Time,Average Content Size,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,"
              "99.99%,100%")
    rows = ["POST,/v1/retrieve,100,2,12,14,3,90,900,9.5,0.2,12,14,15,16,20,30,40,50,80,90,90",
            ",Aggregated,100,2,12,14,3,90,900,9.5,0.2,12,14,15,16,20,30,40,50,80,90,90"]
    (tmp_path / "locust_stats.csv").write_text("\n".join([header, *rows]) + "\n")
    summary = summarise(tmp_path / "locust_stats.csv")
    assert summary["endpoints"] == {"POST /v1/retrieve": {"requests": 100, "failures": 2, "rps": 9.5, "p50": 12.0,
                                                          "p95": 30.0, "p99": 50.0}}
    assert summary["total"]["requests"] == 100
    assert summarise(tmp_path / "absent.csv") == {"endpoints": {}, "total": {}}


def test_citadel_load_refuses_a_remote_url_and_out_of_bound_runs(tmp_path):
    from typer.testing import CliRunner

    from citadel.cli.main import app
    from citadel.config import load_config
    from serving.ray.launcher import ensure_local_identity

    home = tmp_path / "home"
    ensure_local_identity(load_config(environ={"CITADEL_HOME": str(home)}))
    runner = CliRunner()
    refused = runner.invoke(app, ["load", "--url", "http://192.0.2.10:8000", "--minutes", "1", "--home", str(home),
                                  "--out", str(tmp_path / "out")], env={"CITADEL_HOME": str(home)})
    assert refused.exit_code == 2
    assert not (tmp_path / "out" / "locust_stats.csv").exists()
    for extra in (["--minutes", "121"], ["--minutes", "1", "--users", "2001"], ["--minutes", "1", "--shape", "saw"]):
        result = runner.invoke(app, ["load", "--home", str(home), *extra])
        assert result.exit_code == 2, result.output


def test_the_runner_and_the_cli_never_import_locust_into_this_process():
    """Importing locust monkey-patches the whole process with gevent: only locust's own subprocess may."""
    import sys

    import citadel.cli.load_cmd  # noqa: F401
    import loadtests.run_load  # noqa: F401

    assert "locust" not in sys.modules
