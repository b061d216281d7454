"""`citadel drill ...`: failure drills that check a guarantee under load and report what happened.

`citadel drill run SCENARIO|--all --url URL` runs the scenario catalog (loadtests/drills/*.yaml)
against any deployment over HTTP, as a calling service of a home (its token and signing key, like
`citadel load`) with a platform admin's token for the faults; it runs `python -m loadtests.drills.run`
in a process group of its own (the CLI imports no loadtests), bounded by the drills' length plus a
grace. `citadel drill permissions` is the older in-process drill.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import typer
import yaml

from citadel.cli.bench_cmd import HomeOption, _with_bench_home
from citadel.config import load_config

# The catalog's folder, read as files: the CLI imports no loadtests (an import-linter contract).
CATALOG_DIR = Path(__file__).resolve().parents[2] / "loadtests" / "drills"

app = typer.Typer(help="Failure drills (loopback only unless --remote, bounded in time).", no_args_is_help=True)
DRILL_GRACE_S = 300.0  # per drill beyond its load: the fault's end, uploads settling, the report


@app.command("run")
def run(
    scenario: Optional[str] = typer.Argument(None, help="A catalog drill (replica-kill, ...) or a scenario file."),
    run_all: bool = typer.Option(False, "--all", help="Every drill of the catalog, in turn."),
    url: Optional[str] = typer.Option(None, "--url", help="The API (default: what `citadel up` printed for "
                                                          "this home)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Reports folder (default var/drills/<timestamp>)."),
    home: Optional[Path] = typer.Option(None, "--home", help="The home whose credentials (and local cluster) "
                                                             "the drill uses."),
    service: str = typer.Option("local-app", "--service", help="The calling service the traffic goes through."),
    admin_token_file: Optional[Path] = typer.Option(None, "--admin-token-file", help="A platform admin's token "
                                                    "(default: the home's local-admin)."),
    metrics_token_file: Optional[Path] = typer.Option(None, "--metrics-token-file", help="A metrics credential "
                                                      "(server-side retry counts)."),
    node_kill_command: Optional[str] = typer.Option(None, "--node-kill-command", help="Argv (JSON list) that kills "
                                                    "a node given its name (default: the home's local cluster)."),
    workload: Optional[Path] = typer.Option(None, "--workload", help="JSON: tenants, group sets, questions."),
    remote: bool = typer.Option(False, "--remote", help="Allow a URL that is not loopback."),
    as_json: bool = typer.Option(False, "--json"),
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """Run drills (a load, a fault, expectations) and write each one's verdict, report.json and
    timeline.png. Exits 1 when a drill failed, 2 when the run is refused."""
    from citadel.cli.load_cmd import DEFAULT_MODEL_PATH, _default_url, _settings, run_runner, with_prediction

    if not scenario and not run_all:
        raise typer.BadParameter("name a drill or pass --all", param_hint="SCENARIO")
    loaded = load_config(config)
    if home is not None:
        loaded.home = home.resolve()
    url = url or _default_url(loaded)
    out = (out or Path("var/drills") / time.strftime("%Y%m%dT%H%M%S")).resolve()
    drills = _catalog_names() if run_all else [scenario]
    with tempfile.TemporaryDirectory(prefix="citadel-drill-") as scratch:
        settings = _settings(loaded, url, service, True, workload, 0)
        if admin_token_file is not None:
            settings["admin_token"] = admin_token_file.read_text().strip()
        settings_file = Path(scratch) / "settings.json"
        settings_file.touch(mode=0o600)
        settings_file.write_text(json.dumps(settings))
        killer = node_kill_command or _local_node_killer(loaded.home)
        arguments = ["--settings", str(settings_file), "--out", str(out),
                     *(["--all"] if run_all else ["--scenario", scenario]),
                     *(["--metrics-token-file", str(metrics_token_file)] if metrics_token_file else []),
                     *(["--node-kill-command", killer] if killer else []), *(["--remote"] if remote else [])]
        code = run_runner(arguments, _bound_s(drills), module="loadtests.drills.run")
    if code == 2:
        raise typer.Exit(2)
    table_file = out / "drills.json"
    if not table_file.exists():
        typer.echo(f"error: the drills wrote no report (exit {code}); see {out}", err=True)
        raise typer.Exit(1)
    table = json.loads(table_file.read_text())
    for row in table["drills"]:  # the capacity model's p95 and throughput beside each drill's measured ones
        if row["verdict"] != "skipped":
            row["prediction"] = with_prediction(Path(row["report"]), DEFAULT_MODEL_PATH)["prediction"]
    table_file.write_text(json.dumps(table, indent=1) + "\n")
    if as_json:
        print(json.dumps(table, indent=1))
    else:
        _print_verdicts(table)
    raise typer.Exit(0 if table["passed"] else 1)


def _catalog_names() -> list[str]:
    return sorted(path.stem for path in CATALOG_DIR.glob("*.yaml"))


def _bound_s(drills: list[str]) -> float:
    """The wall-clock bound of the whole run: each drill's load (its YAML's phases; the runner refuses
    a name that is neither a catalog drill nor a file) plus a grace."""
    total = 0.0
    for name in drills:
        path = CATALOG_DIR / f"{name}.yaml"
        path = path if path.is_file() else Path(name)
        load = ((yaml.safe_load(path.read_text()) or {}).get("load") or {}) if path.is_file() else {}
        total += sum(float(load.get(phase, 20.0)) for phase in ("before_s", "fault_s", "after_s")) + DRILL_GRACE_S
    return total


def _local_node_killer(home: Path) -> Optional[str]:
    """`citadel cluster kill-node --home HOME` when this home runs a local multi-node cluster."""
    from cluster.multinode import read_state

    if read_state(home) is None:
        return None
    citadel = Path(sys.executable).with_name("citadel")
    return json.dumps([str(citadel), "cluster", "kill-node", "--home", str(home)])


def _print_verdicts(table: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    view = Table(title="Drills")
    for column in ("drill", "verdict", "requests", "checks (measured / limit)"):
        view.add_column(column)
    for row in table["drills"]:
        checks = "; ".join(f"{'ok' if c['passed'] else 'FAILED'} {c['check']}: {c['measured']} / {c['limit']}"
                           for c in row["checks"]) or (row.get("reason") or "")
        view.add_row(row["drill"], row["verdict"], str(row.get("requests") or 0), checks)
    Console().print(view)
    print("reports: " + ", ".join(r["report"] for r in table["drills"] if r.get("report")))


@app.command("permissions")
def permissions(
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Concurrent callers."),
    phase: float = typer.Option(10.0, "--phase", min=1.0, help="Seconds of each phase."),
    home: Optional[Path] = HomeOption,
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """Permission store down under load (503 permissions_unavailable, no unchecked passage), then the
    reranker failing (answers continue, degraded). Exits 1 when a guarantee is broken."""
    from benchmarks.drills import drill_permissions

    report = _with_bench_home(config, home, lambda cfg, log: drill_permissions(cfg, concurrency, phase, log))
    print(json.dumps(report, indent=1))
    down, reranker = report["permissions_down"], report["reranker_failing"]
    phases = [report[p] for p in ("healthy", "permissions_down", "reranker_failing")]
    broken = (any(r["passages_without_live_check"] for r in phases) or down["ok"] or down["other_errors"]
              or reranker["ok"] != reranker["responses"] or not reranker["degraded_rerank_skipped"])
    raise typer.Exit(1 if broken else 0)
