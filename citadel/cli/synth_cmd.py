"""`citadel synth`: synthetic tenants of Markdown documents plus a manifest, for ingestion benchmarks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from citadel.cli.runtime import make_progress


def _sizes(value: str | None) -> tuple[int, ...]:
    return tuple(int(part) for part in (value or "").split(",") if part.strip())


def synth(
    tenants: int = typer.Option(..., "--tenants", min=1, help="Number of tenants."),
    chunks: int = typer.Option(..., "--chunks", min=1, help="Total chunks over all tenants (exact)."),
    out: Path = typer.Option(Path("var/synth"), "--out", help="Output folder (documents + manifest.parquet)."),
    seed: int = typer.Option(0, "--seed", help="Random seed: the same seed writes the same corpus."),
    zipf: float = typer.Option(1.1, "--zipf", help="Zipf exponent of tenant sizes (higher: more skewed)."),
    large: Optional[str] = typer.Option(None, "--large", help="Exact sizes of the largest tenants, e.g. 60000,60000,30000."),
    small_cap: Optional[int] = typer.Option(None, "--small-cap", help="No other tenant gets more chunks than this."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Write realistic synthetic Markdown documents: many small tenants, a few large ones (Zipf-like)."""
    from citadel.ingest.synth import SynthSpec, generate

    spec = SynthSpec(tenants=tenants, chunks=chunks, seed=seed, zipf_exponent=zipf, large=_sizes(large),
                     small_cap=small_cap)
    update, context = make_progress()
    try:
        with context:
            result = generate(spec, out, progress=update)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    summary = result.to_dict()
    print(json.dumps(summary, indent=1) if as_json else json.dumps(summary))
