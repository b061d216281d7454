"""`citadel eval candidates list|export`: candidate test items from feedback and reviewers' edits
(citadel/quality/candidates.py; DESIGN.md §11). An owner promotes or dismisses them over HTTP
(`POST /v1/admin/candidates/{id}/promote|dismiss`); `export` writes the promoted ones as labeled sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from citadel.cli.runtime import tenant_option
from citadel.wiring import Wiring

candidates_app = typer.Typer(help="Candidate test items from thumbs-down feedback and reviewers' edits.",
                             no_args_is_help=True)
ConfigOption = typer.Option(None, "--config", help="YAML config file (else CITADEL_CONFIG, then defaults).")


def _queue(runtime: Wiring):
    from citadel.quality.candidates import CandidateQueue

    return CandidateQueue(runtime.catalog, runtime.personal_data)


@candidates_app.command("list")
def list_candidates(
    tenant: Optional[str] = typer.Option(None, "--tenant", callback=tenant_option, help="Default: every tenant."),
    source: Optional[str] = typer.Option(None, "--source", help="answer_feedback or tool:<name> (default: all)."),
    status: str = typer.Option("pending", "--status", help="pending | promoted | dismissed | all"),
    as_json: bool = typer.Option(False, "--json"),
    config: Optional[Path] = ConfigOption,
) -> None:
    """The candidates of a tenant (or of every tenant), oldest first (at most 1,000 per tenant)."""
    from citadel.errors import InvalidRequest

    runtime = Wiring(config_path=config)
    queue = _queue(runtime)
    tenants = [tenant] if tenant else [t["tenant_id"] for t in runtime.catalog.list_tenants()]
    try:
        rows = [row for t in tenants for row in queue.list(t, source, None if status == "all" else status)]
    except InvalidRequest as error:
        raise typer.BadParameter(error.message) from None
    if as_json:
        print(json.dumps(rows, indent=1, ensure_ascii=False))
        return
    for row in rows:
        item = row["item"]
        what = item.get("question") if "question" in item else f"{item.get('decision')} {item.get('proposed_args')}"
        print(f"{row['id']:>6}  {row['tenant_id']:<16} {row['status']:<9} {row['source']:<32} {str(what)[:90]}")
    print(f"{len(rows)} candidate{'' if len(rows) == 1 else 's'}")


@candidates_app.command("export")
def export(
    tenant: str = typer.Option(..., "--tenant", callback=tenant_option),
    out: Path = typer.Option(..., "--out", help="The promoted answer items, as JSONL in the regression set's "
                             "format (citadel eval rag --set FILE)."),
    tools_dir: Optional[Path] = typer.Option(None, "--tools-dir", help="Where the promoted tool items go, one "
                                             "<tool>.jsonl each (default: <out without suffix>.tools/)."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Write the tenant's promoted candidates as labeled sets."""
    tools = tools_dir or out.with_suffix(".tools")
    report = _queue(Wiring(config_path=config)).export(tenant, out, tools)
    print(json.dumps({"answers": report.answers, "answers_file": str(out), "tools": report.tools,
                      "tools_dir": str(tools) if report.tools else None}))
