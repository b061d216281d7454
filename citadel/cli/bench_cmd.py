"""`citadel bench ...`: benchmarks run from the CLI (more subcommands join this group later)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from citadel.cli.runtime import Runtime

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
    from indexing.bench import bench_ingest

    runtime = Runtime(config_path=config)
    runtime.config.embedding.backend = backend
    result = bench_ingest(runtime.config, chunks=chunks, tenants=tenants, workdir=workdir)
    if as_json:
        print(json.dumps({"rows": result["rows"]}, indent=1))
        return
    for row in result["rows"]:
        print(json.dumps(row))
    print(json.dumps({"raydata_vs_raw_encode": result["ratio"], "notes": result["notes"]}))
