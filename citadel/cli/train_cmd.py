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


@app.command("reader")
def reader(
    out: Optional[Path] = typer.Option(None, "--out", help="Artefact directory (default: the packaged one)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Shared data directory holding squad2/ and corpora/."),
    set_file: Path = typer.Option(PARAPHRASE_SET, "--set", help="The paraphrase set (its dev split is used)."),
    epochs: int = typer.Option(2, "--epochs", min=1, max=10),
    seed: int = typer.Option(13, "--seed"),
    max_pairs: Optional[int] = typer.Option(None, "--max-pairs", min=8, help="Cap the training pairs (a smoke run)."),
    no_paraphrase: bool = typer.Option(False, "--no-paraphrase", help="SQuAD only (no handbook corpora needed)."),
    adapter: str = typer.Option("top_layers", "--adapter", help="top_layers (the top 2; the shipped artefact) | "
                                "lora (every layer, low rank: ~4x slower to train on CPU)."),
    learning_rate: float = typer.Option(5e-5, "--learning-rate", help="Layer (or adapter) learning rate."),
) -> None:
    """Train the reader (DESIGN.md §6): SQuAD 2.0 by article plus the paraphrase dev split, the top
    layers of the packaged MiniLM and a head; writes reader.safetensors and its manifest."""
    import random

    from citadel.eval import rag as rag_eval
    from citadel.reader import network as net
    from citadel.reader import training

    data_dir = Path(data or rag_eval.SHARED_DATA)
    if adapter not in ("lora", "top_layers"):
        raise typer.BadParameter("lora or top_layers", param_hint="--adapter")
    settings = training.TrainSettings(seed=seed, epochs=epochs, max_pairs=max_pairs, adapter=adapter,
                                      learning_rate=learning_rate)
    rng = random.Random(seed)
    train_articles, held_articles = training.split_articles(training.load_squad(data_dir), seed)
    pairs = training.squad_pairs(train_articles, rng)
    described: dict = {"squad": str(training.SQUAD_FILE), "squad_train_articles": [a["title"] for a in train_articles],
                       "squad_held_out_articles": [a["title"] for a in held_articles]}
    if not no_paraphrase:
        items = rag_eval.load_set(set_file, "dev")
        pairs += training.paraphrase_pairs(items, rag_eval.corpus_sections(data_dir))
        described["paraphrase"] = f"{Path(set_file).name} split dev ({len(items)} items)"
    if max_pairs is not None:
        rng.shuffle(pairs)
        pairs = pairs[:max_pairs]
    held_pairs = training.squad_pairs(held_articles, random.Random(seed + 1))
    if max_pairs is not None:
        held_pairs = held_pairs[:max_pairs]
    base_dir = net.base_model_dir()
    network = net.ReaderNetwork(*net.build(base_dir, adapter))
    update, context = make_progress()
    with context:
        result = training.train(network, pairs, settings, progress=update)
    held = training.held_out_figures(network, held_pairs, settings.max_length)
    target = Path(out or net.ARTEFACT_DIR)
    target.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import save_file

    save_file(result.state, str(target / net.WEIGHTS_FILE))
    manifest = training.manifest(net.sha256_of(base_dir / net.BASE_WEIGHTS_FILE), settings, result, held, described)
    (target / net.MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"written": str(target), "pairs": result.pairs, "seconds": manifest["train_seconds"],
                      "held_out": held}, indent=1))
