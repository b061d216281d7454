"""`citadel tiers`: each published tenant's tier, since when, its queries a day over the traffic window,
and the tier the policy gives it now (citadel/segments/tiering.py); `--apply` compacts the tenants whose
tier would change, which is where a move happens. The job runners run the same every
`index.tier_check_interval_s` (citadel/ingest/runner.py); `--apply` moves tenants now."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from citadel.wiring import Wiring

ConfigOption = typer.Option(None, "--config", help="YAML config (default: CITADEL_CONFIG or built-in defaults).")


def tiers(apply: bool = typer.Option(False, "--apply", help="Compact the tenants whose tier the policy changes."),
          as_json: bool = typer.Option(False, "--json"), config: Optional[Path] = ConfigOption) -> None:
    """Tenants' tiers by size and traffic: now, and what their next compaction builds."""
    from citadel.segments.tiering import review_tiers

    runtime = Wiring(config_path=config)
    try:
        reviews = review_tiers(runtime.catalog, runtime.config.index, time.time())
        moved = runtime.move_tiers(time.time()) if apply else []  # what the job runners run on their schedule
    finally:
        runtime.close()
    rows = [{"tenant_id": r.tenant_id, "chunks": r.chunks, "queries_per_day": round(r.queries_per_day, 1),
             "tier": r.tier, "since": None if math.isinf(r.entered_at) else r.entered_at, "wanted": r.wanted}
            for r in reviews]
    if as_json:
        print(json.dumps({"tenants": rows, "compacted": len(moved)}, indent=1))
        return
    table = Table(title="tiers")
    for column in ("tenant", "chunks", "queries/day", "tier", "since", "next"):
        table.add_column(column)
    for row in rows:
        since = "-" if row["since"] is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(row["since"]))
        table.add_row(row["tenant_id"], str(row["chunks"]), str(row["queries_per_day"]), row["tier"], since,
                      row["wanted"])
    Console().print(table)
    if apply:
        Console().print(f"compacted {len(moved)} tenants into their new tier")
