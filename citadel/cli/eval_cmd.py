"""`citadel eval ...`: retrieval metrics on BEIR data, the labeled RAG regression set and the router's paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from citadel.cli.runtime import make_progress, tenant_option
from citadel.wiring import Wiring

app = typer.Typer(help="Evaluation harnesses.", no_args_is_help=True)


@app.command("beir")
def beir(
    data: Path = typer.Option(..., "--data", help="BEIR dataset directory (corpus, queries.jsonl, qrels/)."),
    split: str = typer.Option("test", "--split"),
    mode: str = typer.Option("hybrid", "--mode", help="bm25 | dense | hybrid | hybrid+rerank | all"),
    tenant: str = typer.Option("beir-scifact", "--tenant", help="Tenant the corpus is indexed under.",
                               callback=tenant_option),
    limit: Optional[int] = typer.Option(None, "--limit", help="Evaluate only the first N queries."),
    rerank_depth: int = typer.Option(50, "--rerank-depth", help="Fused candidates the reranker reorders."),
    as_json: bool = typer.Option(False, "--json"),
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """Index the corpus (once) and print nDCG@10, recall@100, MRR@10, queries and p50 latency."""
    from citadel.eval.beir import MODES, ModeRanker, RECALL_K, ensure_indexed, evaluate, load_beir

    modes = MODES if mode == "all" else (mode,)
    if any(m not in MODES for m in modes):
        raise typer.BadParameter(f"mode must be one of {', '.join(MODES)} or all")
    runtime = Wiring(config_path=config)
    dataset = load_beir(data, split)
    update, context = make_progress()
    with context:
        ensure_indexed(runtime, tenant, dataset, progress=update)
    reranker = _reranker(runtime) if "hybrid+rerank" in modes else None
    ranker = ModeRanker(runtime, tenant, depth=RECALL_K, reranker=reranker, rerank_depth=rerank_depth)
    rows = [evaluate(ranker, dataset, m, limit) for m in modes]
    if as_json:
        print(json.dumps(rows[0] if len(rows) == 1 else {"rows": rows}, indent=1))
        return
    for row in rows:
        print(json.dumps(row))


def _reranker(runtime: Wiring):
    try:
        from citadel.rerank.backends import make_reranker
    except ImportError:
        return None
    return make_reranker(runtime.config)


@app.command("rag")
def rag(
    set_file: Optional[Path] = typer.Option(None, "--set", help="Labeled set (a JSONL file or a directory of them); "
                                            "default: tests/regression/rag_set.jsonl. The paraphrase set: "
                                            "tests/regression/paraphrase."),
    split: Optional[str] = typer.Option(None, "--split", help="Only this split of the set (dev | test)."),
    by_stage: bool = typer.Option(False, "--by-stage", help="Name, per item, the first stage where the expected "
                                  "section is lost, and print a table per stage and category."),
    data: Optional[Path] = typer.Option(None, "--data", help="Shared data directory holding corpora/ (default ../shared/data)."),
    overlay: Optional[Path] = typer.Option(None, "--overlay", help="Overlay documents, one folder per tenant."),
    as_json: bool = typer.Option(False, "--json"),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 below the CI thresholds or on any leak."),
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """Load the four handbook tenants (once per home) and score answers on the labeled set."""
    from citadel.eval import rag as rag_eval

    runtime = Wiring(config_path=config)
    update, context = make_progress()
    with context:
        report = rag_eval.run(runtime, set_file or rag_eval.DEFAULT_SET, data or rag_eval.SHARED_DATA,
                              overlay or rag_eval.DEFAULT_OVERLAY, progress=update, split=split, by_stage=by_stage)
    if as_json:
        print(json.dumps(report, indent=1))
    else:
        print(rag_eval.format_table(report))
        if by_stage:
            print("\n" + rag_eval.format_stage_table(report["stages"]))
    if strict and rag_eval.threshold_failures(report):
        raise typer.Exit(code=1)


@app.command("router")
def router(
    set_file: Optional[Path] = typer.Option(None, "--set", help="Labeled messages (JSONL: message, label, path); "
                                            "default: tests/regression/router/messages.jsonl."),
    registry: Optional[Path] = typer.Option(None, "--registry", help="Tool registry whose intents are read from "
                                            "each message; default: examples/crm/tools.yaml."),
    as_json: bool = typer.Option(False, "--json"),
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """Route each labeled message as a run would and print the confusion table (label × path) and
    the accuracy. No index or model is needed beyond the router's own."""
    from citadel.eval import router as router_eval

    result = router_eval.run(set_file or router_eval.DEFAULT_SET, registry or router_eval.DEFAULT_REGISTRY,
                             router=Wiring(config_path=config).router)
    if as_json:
        print(json.dumps(result, indent=1))
        return
    print(router_eval.format_table(result))
    for miss in result["misses"]:
        print(f"miss: [{miss['label']}] expected {miss['expected']}, got {miss['got']}: {miss['message']}")


@app.command("judge")
def judge(
    claims: Optional[Path] = typer.Option(None, "--claims", help="Claim set (default tests/regression/judge/claims.jsonl)."),
    labels: Optional[Path] = typer.Option(None, "--labels", help="Two annotators' labels (default "
                                          "tests/regression/judge/labels.jsonl)."),
    threshold: Optional[float] = typer.Option(None, "--threshold", help="Use this P(supported) cut instead of "
                                              "choosing one on the dev half (even ids)."),
    figures: bool = typer.Option(False, "--figures", help="Put the validator's figure check before the judge, "
                                 "as answers meet it (a claim stating a figure its source lacks is not supported)."),
    as_json: bool = typer.Option(False, "--json"),
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """The judge (answer.reader) against two annotators: agreement, Cohen's kappa vs each and vs their
    consensus, annotator A vs B, and the confusion table, on the dev and test halves."""
    from citadel.config import load_config
    from citadel.eval import judge as judge_eval
    from citadel.reader.factory import make_reader

    claims_path = claims or judge_eval.DEFAULT_CLAIMS
    labels_path = labels or judge_eval.DEFAULT_LABELS
    try:
        judge_eval.load_labels(labels_path)  # before loading the reader: say what is missing at once
    except judge_eval.LabelsMissing as missing:
        typer.echo(str(missing), err=True)
        raise typer.Exit(code=2)
    reader = make_reader(load_config(config))
    origins = claims_path.parent / judge_eval.DEFAULT_ORIGINS.name  # beside the claims; hidden from annotators
    report = judge_eval.run(reader.score, reader.model_id, claims_path, labels_path, threshold, origins, figures)
    print(json.dumps(report, indent=1) if as_json else judge_eval.format_report(report))


@app.command("gate")
def gate(
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="The baseline bundle: a config file (YAML) "
                                            "measured now, or a recorded measurement (JSON from --record); "
                                            "without it, --record alone measures and records the candidate."),
    candidate: Optional[Path] = typer.Option(None, "--candidate", help="The candidate bundle: a config file, or a "
                                             "recorded measurement; default: this working tree's configuration "
                                             "(--config and CITADEL_*)."),
    subset: str = typer.Option("fast", "--subset", help="fast (CI: every 4th item, 4 run pairs) | full."),
    sets: Optional[str] = typer.Option(None, "--sets", help="Comma-separated sets to run (default all: "
                                       "regression, paraphrase_test, runs_parts, judge)."),
    margin: list[str] = typer.Option([], "--margin", help="Override a figure's margin: figure=value (repeatable)."),
    report_dir: Optional[Path] = typer.Option(None, "--report-dir", help="Write gate.md and gate.json here."),
    record: Optional[Path] = typer.Option(None, "--record", help="Also write the candidate's measurement here "
                                          "(the next baseline)."),
    as_json: bool = typer.Option(False, "--json"),
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """Run the labeled sets on both bundles and block (exit 1) when the candidate regresses beyond the
    margins: citation accuracy, refusal precision and recall, source recall, unsupported claims (in the
    answers and in the drafts), the runs' two-part set and the judge's kappa; any leak blocks."""
    from citadel.eval import gate as gate_eval
    from citadel.quality import gate as verdicts

    if subset not in gate_eval.SUBSETS:
        raise typer.BadParameter(f"subset is one of {', '.join(gate_eval.SUBSETS)}")
    chosen = tuple(s.strip() for s in sets.split(",")) if sets else gate_eval.SETS
    if any(s not in gate_eval.SETS for s in chosen):
        raise typer.BadParameter(f"sets are among {', '.join(gate_eval.SETS)}")
    try:
        margins = verdicts.parse_margins(margin)
    except ValueError as error:
        raise typer.BadParameter(str(error))
    if baseline is None and record is None:
        raise typer.BadParameter("give --baseline (and get a verdict) or --record (measure the next baseline)")
    update, context = make_progress()
    with context:
        before = _measured(baseline, None, subset, chosen, update) if baseline is not None else None
        after = _measured(candidate, config, subset, chosen, update)
    if record is not None:
        record.write_text(json.dumps(after.to_dict(), indent=1) + "\n", encoding="utf-8")
    if before is None:
        print(f"recorded bundle {after.bundle.id} ({after.subset}) in {record}")
        return
    if before.subset != after.subset:
        typer.echo(f"the baseline measured the {before.subset!r} subset, the candidate {after.subset!r}", err=True)
        raise typer.Exit(code=2)
    report = verdicts.compare(before.sets, after.sets, before.bundle.id, after.bundle.id,
                              gate_eval.changes(before.bundle, after.bundle), margins)
    if report_dir is not None:
        report_dir.mkdir(parents=True, exist_ok=True)
        (report_dir / "gate.md").write_text(report.to_markdown(), encoding="utf-8")
        (report_dir / "gate.json").write_text(report.to_json() + "\n", encoding="utf-8")
    print(report.to_json() if as_json else report.to_markdown())
    if report.blocked:
        raise typer.Exit(code=1)


def _measured(source: Optional[Path], config: Optional[Path], subset: str, sets, progress):
    """A recorded measurement (.json) as it is; a config file (or the working tree's config) measured now."""
    from citadel.eval import gate as gate_eval

    if source is not None and source.suffix == ".json":
        return gate_eval.load_measurement(source)
    runtime = Wiring(config_path=source or config)
    try:
        return gate_eval.measure(runtime, gate_eval.SUBSETS[subset], sets, progress)
    finally:
        runtime.close()
