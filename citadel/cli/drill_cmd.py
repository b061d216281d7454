"""`citadel drill ...`: failure drills that check a guarantee under load and report what happened."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from citadel.cli.bench_cmd import HomeOption, _with_bench_home

app = typer.Typer(help="Failure drills (loopback only, bounded in time).", no_args_is_help=True)


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
