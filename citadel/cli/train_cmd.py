"""`citadel train gate`: fit the calibrated confidence gate on the dev split of the paraphrase set."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Optional

import typer

from citadel.cli.runtime import make_progress
from citadel.wiring import Wiring

app = typer.Typer(help="Fit the models Citadel calibrates on labeled data.", no_args_is_help=True)
PARAPHRASE_SET = Path(__file__).resolve().parents[2] / "tests" / "regression" / "paraphrase"


@app.command("gate")
def gate(
    set_file: Path = typer.Option(PARAPHRASE_SET, "--set", help="Labeled set (a JSONL file or a directory)."),
    split: str = typer.Option("dev", "--split", help="The split to fit on (never the test split)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write the model (default: the packaged one)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Shared data directory holding corpora/."),
    config: Optional[Path] = typer.Option(None, "--config"),
) -> None:
    """Answer every item of the split (the four handbook tenants, built once per home), read the gate's
    signals and whether the expected section was among the judged passages, fit the model, and write it."""
    from citadel.answer.gate_model import PACKAGED_MODEL, GateExample, fit_gate_model
    from citadel.eval import rag as rag_eval

    if split == "test":
        raise typer.BadParameter("the test split is for measuring; fit on dev", param_hint="--split")
    runtime = Wiring(config_path=config)
    items = rag_eval.load_set(set_file, split)
    update, context = make_progress()
    with context:
        rag_eval.build_tenants(runtime, data or rag_eval.SHARED_DATA, rag_eval.DEFAULT_OVERLAY, progress=update)
        results = rag_eval.evaluate_results(runtime, items, progress=update)
    # Items the router refused (or too empty to search) never reached a gate: they carry no signals.
    examples = [GateExample(tuple(r.signals.values()), r.item.answerable, r.evidence_ranked)
                for r in results if r.signals is not None]
    today = datetime.date.today().isoformat()
    model = fit_gate_model(examples, runtime.embedder.model_id, f"gate-{today}",
                           {"set": str(Path(set_file).name), "split": split, "date": today})
    target = out or PACKAGED_MODEL
    target.write_text(model.to_json(), encoding="utf-8")
    print(json.dumps({"written": str(target), "version": model.version, "answer_at": model.answer_at,
                      "clarify_at": model.clarify_at, "coef": dict(zip(model.features, model.coef)),
                      "fitted": model.fitted}, indent=1))
