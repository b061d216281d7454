"""`citadel train reader`: the pairs it builds, its splits, and a smoke training that writes an
artefact the trained backend loads (CI's tiny run; the real one is documented in docs/benchmarks.md)."""

from __future__ import annotations

import json
import random

import pytest

from citadel.eval.rag import RagItem
from citadel.reader import training

CONTEXT = ("The Normans were a people in Normandy. They gave their name to Normandy, a region in France. "
           "Their identity emerged in the 10th century. Rollo was their first ruler.")
ARTICLE = {"title": "Normans", "paragraphs": [{"context": CONTEXT, "qas": [
    {"question": "In what country is Normandy located?", "is_impossible": False,
     "answers": [{"text": "France", "answer_start": CONTEXT.index("France")}]},
    {"question": "Who was the king of Normandy in 1500?", "is_impossible": True, "answers": []},
]}]}


def test_squad_pairs_label_the_answer_sentence_and_remove_it_for_a_negative():
    pairs = training.squad_pairs([ARTICLE], random.Random(0))
    positives = [p for p in pairs if p.label == 1.0]
    assert {p.kind for p in positives} == {"sentence", "passage"}
    sentence = next(p for p in positives if p.kind == "sentence")
    assert "France" in sentence.text and "Rollo" not in sentence.text
    removal = [p for p in pairs if p.kind == "passage" and p.label == 0.0 and p.question.startswith("In what")]
    assert removal and all("France" not in p.text for p in removal)
    impossible = [p for p in pairs if p.question.startswith("Who was")]
    assert impossible and all(p.label == 0.0 for p in impossible)


def test_articles_are_held_out_whole_and_the_split_is_reproducible():
    articles = [{"title": f"a{i}", "paragraphs": []} for i in range(10)]
    train, held = training.split_articles(articles, seed=13)
    assert len(held) == 2 and not {a["title"] for a in train} & {a["title"] for a in held}
    assert training.split_articles(articles, seed=13) == (train, held)


def test_the_paraphrase_pairs_come_from_the_dev_split_only():
    item = RagItem("p1", "situation", "t", "u", (), "How long is court leave?", "answer", ("leave",), "Court",
                   expected_answer=("as long as needed",), split="dev")
    sections = {"t": {"leave": [("Leave > Court", "Court leave lasts as long as needed. File form A."),
                                ("Leave > Annual", "Annual leave accrues monthly.")]}}
    pairs = training.paraphrase_pairs([item], sections)
    assert [p.label for p in pairs if p.kind == "passage"] == [1.0, 0.0]
    assert [p.label for p in pairs if p.kind == "sentence"] == [1.0, 0.0]
    with pytest.raises(ValueError, match="dev split"):
        training.paraphrase_pairs([RagItem(**{**item.__dict__, "split": "test"})], sections)


@pytest.mark.model
def test_a_smoke_training_writes_an_artefact_the_reader_loads(tmp_path):
    from typer.testing import CliRunner

    from citadel.cli.main import app
    from tests.conftest import shared_data

    shared_data("squad2", "dev-v2.0.json")
    out = tmp_path / "reader"
    result = CliRunner().invoke(app, ["train", "reader", "--out", str(out), "--max-pairs", "16", "--no-paraphrase"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["base_sha256"]) == 64 and manifest["settings"]["max_pairs"] == 16
    assert set(manifest["held_out"]) >= {"sentence_auc", "passage_auc"}
    assert (out / "reader.safetensors").stat().st_size < 10 * 1024 * 1024
    from citadel.reader.trained import TrainedReader

    scores = TrainedReader(out, runtime="torch").score("Where is Normandy?", ["Normandy is in France.", "Cats purr."])
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)
