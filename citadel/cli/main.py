"""`citadel` commands (DESIGN.md §9)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from citadel.cli.runtime import make_progress, tenant_option
from citadel.wiring import Wiring

app = typer.Typer(help="Citadel: multi-tenant, ACL-safe retrieval and cited answers.", no_args_is_help=True)
acl_app = typer.Typer(help="Document ACLs.", no_args_is_help=True)
app.add_typer(acl_app, name="acl")


def _add_eval() -> None:
    from citadel.cli.eval_cmd import app as eval_app
    from citadel.cli.train_cmd import app as train_app

    app.add_typer(eval_app, name="eval")
    app.add_typer(train_app, name="train")

    from citadel.cli.candidates_cmd import candidates_app

    eval_app.add_typer(candidates_app, name="candidates")


_add_eval()


def _add_ingest_tools() -> None:
    from citadel.cli.bench_cmd import app as bench_app
    from citadel.cli.synth_cmd import synth

    app.add_typer(bench_app, name="bench")
    app.command("synth")(synth)


_add_ingest_tools()


def _add_identity() -> None:
    from citadel.cli.identity_cmd import credentials_app, token

    app.add_typer(credentials_app, name="credentials")
    app.command("token")(token)


_add_identity()


def _add_serving() -> None:
    from citadel.cli.serve_cmd import down, up

    app.command("up")(up)
    app.command("down")(down)

    from citadel.cli.cluster_cmd import app as cluster_app

    app.add_typer(cluster_app, name="cluster")

    from citadel.cli.drill_cmd import app as drill_app

    app.add_typer(drill_app, name="drill")

    from citadel.cli.load_cmd import load

    app.command("load")(load)


_add_serving()


def _add_runs() -> None:
    from citadel.cli.runs_cmd import chat, runs_app

    app.command("chat")(chat)
    app.add_typer(runs_app, name="runs")


_add_runs()


def _add_jobs() -> None:
    from citadel.cli.jobs_cmd import jobs_app

    app.add_typer(jobs_app, name="jobs")


_add_jobs()


def _add_tiers() -> None:
    from citadel.cli.tiers_cmd import tiers

    app.command()(tiers)


_add_tiers()


def _add_logs() -> None:
    from citadel.cli.logs_cmd import logs_app

    app.add_typer(logs_app, name="logs")


_add_logs()


def _add_tools() -> None:
    from citadel.cli.tools_cmd import approvals_app, tools_app

    app.add_typer(tools_app, name="tools")
    app.add_typer(approvals_app, name="approvals")


_add_tools()


def _add_quality() -> None:
    from citadel.cli.bundle_cmd import bundle_app
    from citadel.cli.quality_cmd import quality_app

    app.add_typer(bundle_app, name="bundle")
    app.add_typer(quality_app, name="quality")


_add_quality()
console = Console(stderr=True)

ConfigOption = typer.Option(None, "--config", help="YAML config file (else CITADEL_CONFIG, then defaults).")


def _groups(value: str | None) -> list[str]:
    return [g.strip() for g in (value or "").split(",") if g.strip()]


def _fail(message: str, code: int = 2) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


@app.command()
def ingest(
    paths: list[Path] = typer.Argument(None, help="Files or directories to ingest."),
    tenant: Optional[str] = typer.Option(None, "--tenant", help="Tenant id (a manifest names its own).",
                                         callback=tenant_option),
    groups: Optional[str] = typer.Option(None, "--groups", help="Comma-separated groups allowed to read ('*' = whole tenant)."),
    acl: Optional[Path] = typer.Option(None, "--acl", help="YAML ACL file: default + per-document groups."),
    manifest: Optional[Path] = typer.Option(None, "--manifest", help="Parquet/JSONL document records: tenant_id, document_id, source[, groups, version, owner, status, effective_date, supersedes]."),
    trust_front_matter: bool = typer.Option(
        False, "--trust-front-matter",
        help="Let each file's front matter set its id, groups, owner, status, effective date, supersedes and "
             "version (an operator's own files only; without it front matter gives only the title)."),
    local: bool = typer.Option(False, "--local", help="Run in-process instead of on Ray Data."),
    address: Optional[str] = typer.Option(None, "--address", help="Run on an existing Ray cluster (host:port of "
                                           "its GCS) instead of starting a local one."),
    retry_dead_letters: bool = typer.Option(
        False, "--retry-dead-letters", help="Replay dead letters (this tenant's, or all on Ray); a scanned PDF's OCR "
        "gets its budgets times ingest.ocr.retry_multiplier."),
    as_json: bool = typer.Option(False, "--json", help="Print the job report as JSON."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Parse, chunk, embed and publish documents: on Ray Data when ray is installed, else in-process."""
    from citadel.cli.ingest_cmd import IngestRequest, UsageError, run_ingest

    request = IngestRequest(paths=list(paths or []), tenant=tenant, groups=None if groups is None else _groups(groups),
                            acl_file=acl, manifest=manifest, retry_dead_letters=retry_dead_letters, local=local,
                            trust_front_matter=trust_front_matter)
    from citadel.cli.cluster_cmd import use_address

    runtime = Wiring(config_path=config)
    use_address(runtime.config, address)
    try:
        reports = run_ingest(runtime, request)
    except UsageError as error:
        _fail(str(error))
    if reports is None:
        console.print("no dead letters to retry")
        return
    for report in reports:
        _print_report(report, as_json)


def _print_report(report: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=1))
        return
    for item in report["files"]:
        if item["status"] == "failed":
            console.print(f"[red]failed[/red] {item['source']}: [{item['code']}] {item['reason']}")
    summary = {k: report[k] for k in ("job_id", "tenant_id", "status", "documents", "published", "unchanged",
                                      "failed", "chunks", "partition_chunks", "tier", "chunks_per_s")}
    print(json.dumps({**summary, "seconds": report["seconds"]}))


@app.command()
def retrieve(
    question: str = typer.Argument(..., help="The question or search text."),
    tenant: str = typer.Option(..., "--tenant", callback=tenant_option),
    user: str = typer.Option(..., "--user"),
    groups: str = typer.Option("", "--groups", help="Comma-separated groups of the user."),
    top_k: int = typer.Option(8, "--top-k", min=1, max=50),
    as_json: bool = typer.Option(False, "--json"),
    config: Optional[Path] = ConfigOption,
) -> None:
    """ACL-scoped hybrid retrieval for one principal."""
    from citadel.errors import EmbeddingModelMismatch
    from citadel.types import Principal

    runtime = Wiring(config_path=config)
    principal = Principal(tenant, user, frozenset(_groups(groups)))
    try:
        result = runtime.retriever.retrieve(principal, question, top_k=top_k)
    except EmbeddingModelMismatch as error:
        _fail(str(error))
    if as_json:
        print(json.dumps(result.to_dict(), indent=1))
        return
    table = Table(title=f"{len(result.passages)} passages (plan: {result.plan})")
    for column in ("#", "document", "v", "heading", "page", "score", "text"):
        table.add_column(column)
    for rank, p in enumerate(result.passages, start=1):
        table.add_row(str(rank), p.document_id, str(p.version), p.heading, str(p.page or ""),
                      f"{p.score:.4f}", p.text[:120].replace("\n", " "))
    Console().print(table)


@app.command()
def ask(
    question: str = typer.Argument(..., help="The question."),
    tenant: str = typer.Option(..., "--tenant", callback=tenant_option),
    user: str = typer.Option(..., "--user"),
    groups: str = typer.Option("", "--groups", help="Comma-separated groups of the user."),
    as_json: bool = typer.Option(False, "--json"),
    config: Optional[Path] = ConfigOption,
) -> None:
    """A cited answer from the documents this principal may read, or a refusal with its reason."""
    from citadel.errors import EmbeddingModelMismatch
    from citadel.types import Principal

    runtime = Wiring(config_path=config)
    try:
        response = runtime.answer_service.ask(Principal(tenant, user, frozenset(_groups(groups))), question)
    except EmbeddingModelMismatch as error:
        _fail(str(error))
    if as_json:
        print(json.dumps(response.to_dict(), indent=1))
        return
    _print_answer(response)


def _governance_note(citation: dict) -> str:
    """" - policy HR-7 rev 3, confidential" when the catalog states any governance of the cited version."""
    parts = []
    if citation.get("policy_id"):
        revision = f" rev {citation['policy_revision']}" if citation.get("policy_revision") else ""
        parts.append(f"policy {citation['policy_id']}{revision}")
    if citation.get("sensitivity"):
        parts.append(citation["sensitivity"])
    return f" - {', '.join(parts)}" if parts else ""


def _print_answer(response) -> None:
    from rich.markup import escape

    from citadel.answer.service import NOT_CONFIRMED

    out = Console(soft_wrap=True)  # long answers stay one line each: copyable, greppable
    if response.outcome == NOT_CONFIRMED:  # nothing asserted; the citations are the closest evidence
        out.print(f"[cyan]not confirmed[/cyan]: {escape(response.answer)}")
        if response.citations:
            out.print("closest evidence:")
    elif response.refused:
        out.print(f"[yellow]refused[/yellow] ({response.reason}): {escape(response.answer)}")
    else:
        out.print(f"[green]answered[/green]: {escape(response.answer)}")
    for number, c in enumerate(response.citations, start=1):
        page = f", page {c['page']}" if c["page"] is not None else ""
        out.print(f"  [bold][{number}][/bold] {escape(c['title'])} ({escape(c['document_id'])} v{c['version']})"
                  f" - {escape(c['heading'])}{page} - {escape(c['source'])}{escape(_governance_note(c))}")
        if c.get("url"):  # the deployment's link that opens the section (GET on the HTTP API)
            out.print(f"      [dim]open:[/dim] {escape(c['url'])}", emoji=False)  # ":hotel:" is an id, not an emoji
    if response.degraded:
        out.print(f"[dim]degraded: {', '.join(response.degraded)}[/dim]")


@app.command()
def withdraw(
    tenant: str = typer.Option(..., "--tenant", callback=tenant_option),
    doc: str = typer.Option(..., "--doc", help="Document id."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Withdraw a document: it stops being returned on the next query, then its text is deleted from
    the partition files, its raw uploads and the answer log (citadel/ingest/withdrawal.py)."""
    from citadel.errors import NotFound
    from citadel.ingest.withdrawal import withdraw_document

    runtime = Wiring(config_path=config)
    try:
        report = withdraw_document(runtime.catalog, runtime.ingestor(), runtime.config.home,
                                   runtime.config.partitions_dir, tenant, doc, actor="cli", objects=runtime.objects)
    except NotFound as error:
        _fail(str(error))
    print(json.dumps(report.to_dict()))


@app.command()
def compact(tenant: str = typer.Option(..., "--tenant", callback=tenant_option),
            config: Optional[Path] = ConfigOption) -> None:
    """Rebuild a tenant's base segment now, folding in its delta and dropping superseded and withdrawn
    rows (publishes do this by themselves past the thresholds in `index.*`)."""
    from citadel.errors import NotFound

    runtime = Wiring(config_path=config)
    try:
        report = runtime.ingestor().compact(tenant)
    except NotFound as error:
        _fail(str(error))
    data = report.to_dict()
    print(json.dumps({key: data[key] for key in ("job_id", "tenant_id", "status", "segment_id", "tier",
                                                 "partition_chunks", "seconds")}))


@app.command()
def reembed(tenant: str = typer.Option(..., "--tenant", callback=tenant_option),
            config: Optional[Path] = ConfigOption) -> None:
    """Embed every live row of a tenant again with the configured model (after a model change) and
    publish them as a new base segment. Resumable: a crashed run continues from its last batch."""
    from citadel.errors import NotFound

    runtime = Wiring(config_path=config)
    update, context = make_progress()
    try:
        with context:
            report = runtime.ingestor(progress=update).reembed(tenant)
    except NotFound as error:
        _fail(str(error))
    data = report.to_dict()
    print(json.dumps({key: data[key] for key in ("job_id", "tenant_id", "status", "segment_id", "tier",
                                                 "partition_chunks", "reembed", "seconds")}))


@acl_app.command("set")
def acl_set(
    tenant: str = typer.Option(..., "--tenant", callback=tenant_option),
    doc: str = typer.Option(..., "--doc"),
    groups: str = typer.Option(..., "--groups", help="Comma-separated groups ('*' = whole tenant)."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Replace a document's ACL groups; effective on the next query, no re-indexing."""
    from citadel.errors import NotFound

    try:
        version = Wiring(config_path=config).catalog.set_acl(tenant, doc, _groups(groups), actor="cli")
    except NotFound as error:
        _fail(str(error))
    print(json.dumps({"tenant_id": tenant, "document_id": doc, "groups": _groups(groups), "acl_version": version}))


@app.command()
def tenants(as_json: bool = typer.Option(False, "--json"), config: Optional[Path] = ConfigOption) -> None:
    """List tenants with their published segment, tier and counts."""
    rows = Wiring(config_path=config).catalog.list_tenants()
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table(title="tenants")
    for column in ("tenant", "tier", "documents", "chunks", "segment"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["tenant_id"], str(row["tier"]), str(row["published_documents"]),
                      str(row["published_chunks"]), str(row["segment_id"]))
    Console().print(table)


@app.command("purge-logs")
def purge_logs(config: Optional[Path] = ConfigOption) -> None:
    """Delete answer-log entries older than `answer.answer_log_retention_days` (run it from cron or a
    CronJob; serving processes also purge every `answer.answer_log_purge_interval_s`), and kept prompts
    older than `answer.prompt_retention_days`; and withdraw (deleting every copy) the documents past
    their retention class (`governance.retention_classes`)."""
    import functools

    from citadel.catalog.retention import purge_expired_answers, purge_expired_documents, purge_expired_prompts
    from citadel.catalog.retention import purge_expired_sessions
    from citadel.ingest.withdrawal import withdraw_document

    runtime = Wiring(config_path=config)
    purged = purge_expired_answers(runtime.catalog, runtime.config.answer)
    # Conversations and runs idle past agent.retention_days go by the same purge.
    sessions = purge_expired_sessions(runtime.run_store, runtime.conversation_store, runtime.config.agent)
    prompts = purge_expired_prompts(runtime.catalog, runtime.config.answer)
    withdraw = functools.partial(withdraw_document, runtime.catalog, runtime.ingestor(), runtime.config.home,
                                 runtime.config.partitions_dir, objects=runtime.objects)
    documents = purge_expired_documents(runtime.catalog, withdraw, runtime.config.governance)
    print(json.dumps({"purged": purged, "retention_days": runtime.config.answer.answer_log_retention_days,
                      "prompts_purged": prompts, "prompt_retention_days": runtime.config.answer.prompt_retention_days,
                      **sessions, "session_retention_days": runtime.config.agent.retention_days,
                      "documents_purged": documents}))


@app.command("dead-letters")
def dead_letters(tenant: Optional[str] = typer.Option(None, "--tenant", callback=tenant_option),
                 config: Optional[Path] = ConfigOption) -> None:
    """List dead letters not yet retried."""
    print(json.dumps(Wiring(config_path=config).catalog.dead_letters(tenant), indent=1))


@app.command()
def demo() -> None:
    """Ingest the fictional demo tenants in examples/ and show ACL-safe retrieval."""
    from citadel.cli.demo import run_demo

    run_demo()


def _add_capacity() -> None:
    from citadel.cli.capacity_cmd import app as capacity_app

    app.add_typer(capacity_app, name="capacity", help="Capacity planner and simulator.")


_add_capacity()


def main() -> None:
    from citadel.guardrails.log_masking import install_log_masking
    from citadel.guardrails.personal import PATTERNS_ONLY

    install_log_masking(PATTERNS_ONLY)  # the commands' log lines carry no personal data
    app()


if __name__ == "__main__":
    sys.exit(main())
