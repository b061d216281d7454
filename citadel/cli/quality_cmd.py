"""`citadel quality report`: the worst topics of the last days by the signals without labels
(DESIGN.md §11; citadel/quality/report.py), from the home's answer log and feedback."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer

from citadel.cli.runtime import tenant_option
from citadel.wiring import Wiring

quality_app = typer.Typer(help="The quality plane's signals without labels, as a report.", no_args_is_help=True)
# Answer-log rows one tenant's report reads at most (the newest; the report says when it hit the limit).
DEFAULT_MAX_ROWS = 20_000


@quality_app.command("report")
def report(
    days: float = typer.Option(7.0, "--days", min=0.01, max=366.0, help="The period: the last N days."),
    tenant: Optional[str] = typer.Option(None, "--tenant", callback=tenant_option,
                                         help="One tenant (default: every tenant of the catalog)."),
    top: int = typer.Option(20, "--top", min=1, max=1_000, help="Topics listed, worst first."),
    max_rows: int = typer.Option(DEFAULT_MAX_ROWS, "--max-rows", min=1, max=1_000_000,
                                 help="Answer-log rows read per tenant at most (the newest)."),
    as_json: bool = typer.Option(False, "--json", help="JSON instead of a markdown table."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML config file."),
) -> None:
    """The worst topics by rephrases, thumbs-down (with reasons), the verifier's pass rate and low best
    scores: a markdown table by default."""
    from citadel.quality.report import report_from_catalog, to_markdown

    runtime = Wiring(config_path=config)
    catalog = runtime.catalog
    tenants = [tenant] if tenant is not None else sorted(t["tenant_id"] for t in catalog.list_tenants())
    result = report_from_catalog(catalog, tenants, days, runtime.config.signals.low_best_score, max_rows, time.time())
    if as_json:
        print(json.dumps(result.to_dict(top), indent=1, ensure_ascii=False))
    else:
        print(to_markdown(result, top), end="")
