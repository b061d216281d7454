"""`citadel eval ...`: retrieval metrics on BEIR data and the labeled RAG regression set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from citadel.cli.runtime import Runtime, make_progress

app = typer.Typer(help="Evaluation harnesses.", no_args_is_help=True)


@app.command("beir")
def beir(
    data: Path = typer.Option(..., "--data", help="BEIR dataset directory (corpus, queries.jsonl, qrels/)."),
    split: str = typer.Option("test", "--split"),
    mode: str = typer.Option("hybrid", "--mode", help="bm25 | dense | hybrid | hybrid+rerank | all"),
    tenant: str = typer.Option("beir-scifact", "--tenant", help="Tenant the corpus is indexed under."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Evaluate only the first N queries."),
    as_json: bool = typer.Option(False, "--json"),
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """Index the corpus (once) and print nDCG@10, recall@100, MRR@10, queries and p50 latency."""
    from citadel.eval.beir import MODES, ModeRanker, RECALL_K, ensure_indexed, evaluate, load_beir

    modes = MODES if mode == "all" else (mode,)
    if any(m not in MODES for m in modes):
        raise typer.BadParameter(f"mode must be one of {', '.join(MODES)} or all")
    runtime = Runtime(config_path=config)
    dataset = load_beir(data, split)
    update, context = make_progress()
    with context:
        ensure_indexed(runtime, tenant, dataset, progress=update)
    reranker = _reranker(runtime) if "hybrid+rerank" in modes else None
    ranker = ModeRanker(runtime, tenant, depth=RECALL_K, reranker=reranker)
    rows = [evaluate(ranker, dataset, m, limit) for m in modes]
    if as_json:
        print(json.dumps(rows[0] if len(rows) == 1 else {"rows": rows}, indent=1))
        return
    for row in rows:
        print(json.dumps(row))


def _reranker(runtime: Runtime):
    try:
        from citadel.rerank.backends import make_reranker
    except ImportError:
        return None
    return make_reranker(runtime.config)
