"""`citadel jobs list` / `citadel jobs show JOB`: ingestion jobs as the catalog records them (an upload's
queued job with its document, version, attempts, lease and progress; citadel/ingest/runner.py), read
from the catalog every process shares, so a job any runner works on shows here."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from citadel.cli.runtime import tenant_option
from citadel.wiring import Wiring

jobs_app = typer.Typer(help="Ingestion jobs: queued uploads, their runs and progress.", no_args_is_help=True)
console = Console()
ConfigOption = typer.Option(None, "--config", help="YAML config (default: CITADEL_CONFIG or built-in defaults).")
MAX_LISTED = 1_000


@jobs_app.command("list")
def list_jobs(
    tenant: Optional[str] = typer.Option(None, "--tenant", callback=tenant_option, help="Only this tenant's jobs."),
    limit: int = typer.Option(20, "--limit", min=1, max=MAX_LISTED, help="How many of the newest jobs."),
    as_json: bool = typer.Option(False, "--json"),
    config: Optional[Path] = ConfigOption,
) -> None:
    """The newest jobs, newest first: status, document and version, attempts, stage."""
    from citadel.ingest.runner import job_view

    wiring = Wiring(config_path=config)
    try:
        jobs = [job_view(row) for row in wiring.catalog.list_jobs(None if tenant is None else [tenant], limit)]
    finally:
        wiring.close()
    if as_json:
        print(json.dumps(jobs))
        return
    table = Table("job", "tenant", "kind", "status", "document", "version", "attempts", "stage", "created")
    for job in jobs:
        progress = job["progress"] or {}
        table.add_row(job["job_id"], job["tenant_id"], job["kind"], job["status"], job["document_id"] or "",
                      "" if job["version"] is None else str(job["version"]),
                      "" if job["attempts"] is None else str(job["attempts"]), progress.get("stage", ""),
                      time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(job["created_at"])))
    console.print(table)


@jobs_app.command("show")
def show_job(job_id: str = typer.Argument(..., help="The job id (POST /v1/admin/.../documents returned it)."),
             config: Optional[Path] = ConfigOption) -> None:
    """One job as JSON: its row, report, attempts, lease and progress (documents, chunks, stage), and
    which runner holds it now."""
    from citadel.ingest.runner import job_view

    wiring = Wiring(config_path=config)
    try:
        row = wiring.catalog.get_job(job_id)
    finally:
        wiring.close()
    if row is None:
        typer.echo(f"error: no job {job_id!r}", err=True)
        raise typer.Exit(1)
    print(json.dumps({**job_view(row), "owner": row.get("owner") if row.get("state") == "leased" else None}))
