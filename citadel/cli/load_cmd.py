"""`citadel load`: a bounded headless locust run against a deployment's HTTP API (loadtests/).

The command acts as the calling service of a Citadel home (by default the local app service that
`citadel up` provisions): its bearer token and the HS256 key it signs user contexts with come from
the home's secrets, the admin token (for the upload workload) too when present. It imports neither
locust nor loadtests (HTTP-only, outside the core): it runs `python -m loadtests.run_load` in a
process group of its own, which runs locust in another, each bounded by the run time plus a grace,
and leaves nothing running. Loopback only unless `--remote` (loadtests/run_load.py refuses).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import typer

from citadel.cli.capacity_cmd import DEFAULT_MODEL_PATH
from citadel.config import CitadelConfig, load_config

MAX_MINUTES = 120.0
MAX_USERS = 2000
DEFAULT_URL = "http://127.0.0.1:8000"
SHAPE_NAMES = ("diurnal", "step", "spike", "constant")  # loadtests/shapes.py's (the CLI imports no loadtests)
REPO = Path(__file__).resolve().parents[2]
STOP_WAIT_S = 30.0
RUNNER_GRACE_S = 120.0  # beyond the run time: locust's own grace (60 s) and its kill wait, with room


def _default_url(config: CitadelConfig) -> str:
    """What a running `citadel up` of this home printed, else loopback on the configured port."""
    from serving.ray.launcher import RunFiles

    ready = RunFiles.of(config).ready
    if ready.exists():
        try:
            return json.loads(ready.read_text())["url"]
        except (ValueError, KeyError):
            pass
    return f"http://127.0.0.1:{config.serving.port}"


def _settings(config: CitadelConfig, url: str, service: str, uploads: bool, workload: Optional[Path],
              seed: int) -> dict:
    """loadtests.population.LoadSettings as JSON: the service's token and signing key, the admin token."""
    from citadel.identity.keys import current_service_key
    from serving.ray.launcher import LOCAL_ADMIN_SERVICE, token_path

    service_token = token_path(config, service)
    if not service_token.exists():
        raise typer.BadParameter(f"no service token at {service_token}: run `citadel up` (it provisions "
                                 f"the local app service) or pass --home/--service", param_hint="--service")
    key = current_service_key(config.service_keys_path, service)
    admin = token_path(config, LOCAL_ADMIN_SERVICE)
    return {"url": url, "service": service, "service_token": service_token.read_text().strip(), "kid": key.kid,
            "secret_hex": key.secret, "audience": config.identity.audience,
            "admin_token": admin.read_text().strip() if uploads and admin.exists() else None,
            "workload": json.loads(workload.read_text()) if workload else {}, "seed": seed,
            "context_ttl_s": min(300, config.identity.max_ttl_s)}


def load(
    url: Optional[str] = typer.Option(None, "--url", help="The API (default: what `citadel up` printed for this "
                                                          f"home, else {DEFAULT_URL})."),
    shape: str = typer.Option("diurnal", "--shape", help="diurnal (a day with a peak), step, spike or constant "
                                                           "(one load level)."),
    minutes: float = typer.Option(..., "--minutes", min=0.1, max=MAX_MINUTES, help="Run time in minutes."),
    users: int = typer.Option(20, "--users", min=1, max=MAX_USERS, help="Peak concurrent virtual users."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for locust's CSV and HTML reports "
                                                           "(default var/load/<timestamp>)."),
    home: Optional[Path] = typer.Option(None, "--home", help="The Citadel home whose credentials the run uses."),
    service: str = typer.Option("local-app", "--service", help="The calling service the virtual users go through."),
    uploads: bool = typer.Option(True, "--uploads/--no-uploads", help="Admin uploads at a low rate (needs the "
                                                                      "home's local-admin token)."),
    workload: Optional[Path] = typer.Option(None, "--workload", help="JSON: tenants (group sets, questions), "
                                                                     "Zipf exponents, users per tenant."),
    seed: int = typer.Option(0, "--seed"),
    remote: bool = typer.Option(False, "--remote", help="Allow a URL that is not loopback."),
    model: Path = typer.Option(DEFAULT_MODEL_PATH, "--model", help="The calibrated capacity model whose prediction "
                                                                   "the summary shows (default model when absent)."),
    as_json: bool = typer.Option(False, "--json"),
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """Load a deployment with locust (retrieve, answer, agentic runs, uploads), bounded in time and users;
    prints p50/p95/p99, requests/s and errors per endpoint."""
    if shape not in SHAPE_NAMES:
        raise typer.BadParameter(f"one of {', '.join(SHAPE_NAMES)}", param_hint="--shape")
    loaded = load_config(config)
    if home is not None:
        loaded.home = home.resolve()
    url = url or _default_url(loaded)
    out = (out or Path("var/load") / time.strftime("%Y%m%dT%H%M%S")).resolve()
    with tempfile.TemporaryDirectory(prefix="citadel-load-") as scratch:
        settings = Path(scratch) / "settings.json"
        settings.touch(mode=0o600)
        settings.write_text(json.dumps(_settings(loaded, url, service, uploads, workload, seed)))
        code = run_runner(["--settings", str(settings), "--shape", shape, "--run-time-s", str(minutes * 60),
                           "--users", str(users), "--out", str(out), *(["--remote"] if remote else [])],
                          minutes * 60 + RUNNER_GRACE_S)
    if code == 2:
        raise typer.Exit(2)  # refused: the runner said why on stderr
    summary_file = out / "summary.json"
    if not summary_file.exists():
        typer.echo(f"error: the load run wrote no summary (exit {code}); see {out}", err=True)
        raise typer.Exit(1)
    summary = with_prediction(summary_file, model)
    if as_json:
        print(json.dumps(summary, indent=1))
    else:
        _print(summary)
    raise typer.Exit(1 if summary["timed_out"] or not summary["total"] else 0)


def with_prediction(summary_file: Path, model: Optional[Path]) -> dict:
    """The run's summary with the capacity model's p95 and throughput for the same load beside the
    measured ones (`prediction`), written back to the file."""
    from capacity.measured import attach_prediction

    summary = json.loads(summary_file.read_text())
    summary["prediction"] = attach_prediction(summary, model)
    summary_file.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def run_runner(arguments: list[str], timeout_s: float, module: str = "loadtests.run_load") -> int:
    """`python -m MODULE ARGUMENTS` (loadtests.run_load by default) in its own process group, its stdout (the summary JSON)
    discarded; past `timeout_s` that group, and only it, is killed. Its exit code (-9 when killed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen([sys.executable, "-m", module, *arguments], cwd=REPO, env=env,
                               stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return _stop(process)
    except BaseException:  # Ctrl-C: stop the run rather than leave it behind
        _stop(process)
        raise


def _stop(process: subprocess.Popen) -> int:
    """TERM the runner's group (the runner then ends locust's group), KILL it if it lingers."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.wait()


def _print(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary['shape']} load, {summary['users']} users, {summary['run_time_s'] / 60:g} min "
                        f"against {summary['url']}")
    for column in ("endpoint", "requests", "errors", "req/s", "p50 ms", "p95 ms", "p99 ms"):
        table.add_column(column)
    rows = [*summary["endpoints"].items(), *([("all", summary["total"])] if summary["total"] else [])]
    for name, row in rows:
        table.add_row(name, str(row["requests"]), str(row["failures"]), f"{row['rps']:.2f}",
                      *(f"{row[p]:.0f}" for p in ("p50", "p95", "p99")))
    Console().print(table)
    predicted = summary.get("prediction") or {}
    if "p95_ms" in predicted:
        print(f"capacity model ({predicted['model']}): p95 {predicted['p95_ms']:.0f} ms, "
              f"{predicted['throughput_rps']:.2f} req/s; measured p95 {summary['total']['p95']:.0f} ms, "
              f"{summary['total']['rps']:.2f} req/s")
    print(f"reports: {summary['html']} and {summary['out_dir']}/locust_*.csv")
