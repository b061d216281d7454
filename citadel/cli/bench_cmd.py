"""`citadel bench ...`: benchmarks run from the CLI (more subcommands join this group later)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from citadel.wiring import Wiring
app = typer.Typer(help="Benchmarks.", no_args_is_help=True)


@app.command("ingest")
def ingest(
    chunks: int = typer.Option(2000, "--chunks", min=1, help="Synthetic chunks embedded by each mode."),
    tenants: int = typer.Option(4, "--tenants", min=1, help="Tenants the synthetic chunks spread over."),
    backend: str = typer.Option("minilm", "--backend", help="Embedder: minilm (the real model) or hash (plumbing check)."),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="Scratch folder (default: a temporary one)."),
    as_json: bool = typer.Option(False, "--json", help="Print {\"rows\": [...]} as JSON."),
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """Chunks/s of the Ray Data pipeline beside a raw encode() loop of the same model on the same texts."""
    from benchmarks.ingest_bench import bench_ingest

    runtime = Wiring(config_path=config)
    runtime.config.embedding.backend = backend
    result = bench_ingest(runtime.config, chunks=chunks, tenants=tenants, workdir=workdir)
    if as_json:
        print(json.dumps({"rows": result["rows"]}, indent=1))
        return
    for row in result["rows"]:
        print(json.dumps(row))
    print(json.dumps({"raydata_vs_raw_encode": result["ratio"], "notes": result["notes"]}))


@app.command("serve")
def serve(
    concurrency: str = typer.Option("1,8,32", "--concurrency", help="Comma-separated client concurrencies."),
    duration: float = typer.Option(20.0, "--duration", min=1.0, help="Measured seconds per cell."),
    warmup: float = typer.Option(3.0, "--warmup", min=0.0, help="Unmeasured seconds before each cell."),
    settle: float = typer.Option(75.0, "--settle", min=0.0, help="Seconds to watch replicas scale down after load."),
    home: Optional[Path] = typer.Option(None, "--home", help="An ingested Citadel home (default: the examples, "
                                                             "ingested into a temporary one)."),
    as_json: bool = typer.Option(False, "--json", help="Print {\"rows\": [...], ...} as JSON."),
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """/v1/answer p50/p95/p99 and requests/s: fused, split and in-process, side by side in one run."""
    from benchmarks.serve_bench import bench_serve

    levels = [int(c) for c in concurrency.split(",") if c.strip()]
    result = _with_bench_home(config, home, lambda cfg, log: bench_serve(cfg, levels, duration, warmup, settle, log=log))
    if as_json:
        print(json.dumps(result, indent=1))
        return
    for row in result["rows"]:
        print(json.dumps(row))
    print(json.dumps({"ratios": result["ratios"], "healthz_p50_ms": result["healthz_p50_ms"]}))
    for sample in result["autoscaling"]:
        print(json.dumps(sample))


def _with_bench_home(config: Optional[Path], home: Optional[Path], run):
    """Run `run(config, log)` on `home`, or on the examples ingested into a temporary home; progress
    goes to stderr so stdout carries only the result."""
    import tempfile

    runtime = Wiring(config_path=config)

    def log(row) -> None:
        print(json.dumps(row), file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="citadel-bench-") as scratch, _stdout_to_stderr():
        if home is None:
            from citadel.cli.demo import ingest_examples

            runtime.config.home = Path(scratch) / "home"
            ingest_examples(Wiring(config=runtime.config))
        else:
            runtime.config.home = home
        return run(runtime.config, log)


@contextlib.contextmanager
def _stdout_to_stderr():
    """While a benchmark runs, everything written to stdout (Python or Ray's C++ core, e.g. its
    shutdown notices) goes to stderr, so stdout carries only the JSON result printed afterwards."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


HomeOption = typer.Option(None, "--home", help="An ingested Citadel home (default: the examples, ingested into a "
                                               "temporary one).")


@app.command("hedge")
def hedge(
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Concurrent clients."),
    duration: float = typer.Option(20.0, "--duration", min=1.0, help="Measured seconds per case."),
    warmup: float = typer.Option(4.0, "--warmup", min=0.0, help="Unmeasured seconds before each case."),
    home: Optional[Path] = HomeOption,
    as_json: bool = typer.Option(False, "--json"),
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """Hedged retriever reads: 3 replicas, one ~10x slower; healthy vs slow without and with hedging."""
    from benchmarks.drills import bench_hedge

    result = _with_bench_home(config, home, lambda cfg, log: bench_hedge(cfg, concurrency, duration, warmup, log))
    print(json.dumps(result, indent=1 if as_json else None))


@app.command("breaker")
def breaker(
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Concurrent clients."),
    before: float = typer.Option(20.0, "--before", help="Seconds of normal load before the fault."),
    fault: float = typer.Option(60.0, "--fault", help="Seconds the generator stays slow."),
    after: float = typer.Option(50.0, "--after", help="Seconds of load after the fault is removed."),
    slow_ms: float = typer.Option(6000.0, "--slow-ms", help="Latency the fault adds to the generator."),
    slo_ms: float = typer.Option(1000.0, "--slo-ms", help="The answer p95 SLO the windows are judged by."),
    home: Optional[Path] = HomeOption,
    as_json: bool = typer.Option(False, "--json"),
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """Generator slowed to 6 s mid-run: when the breaker trips, p95 per 10 s window, the staged return."""
    from benchmarks.drills import bench_breaker

    result = _with_bench_home(config, home, lambda cfg, log: bench_breaker(cfg, concurrency, before, fault, after,
                                                                          slow_ms, slo_ms, log))
    print(json.dumps(result, indent=1 if as_json else None))
