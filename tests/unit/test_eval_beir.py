import gzip
import json

import pytest
from typer.testing import CliRunner

from citadel.eval.metrics import mrr_at_k, ndcg_at_k, recall_at_k


def test_metrics_against_hand_computed_values():
    relevant = {"a": 1, "b": 1}
    assert ndcg_at_k(["a", "b", "c"], relevant, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["c", "a"], relevant, 10) == pytest.approx((1 / 1.5849625) / (1 + 1 / 1.5849625))
    assert recall_at_k(["c", "a"], relevant, 100) == 0.5
    assert mrr_at_k(["c", "x", "b"], relevant, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(["c"], relevant, 10) == 0.0


@pytest.fixture
def tiny_beir(tmp_path):
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    docs = [
        {"_id": "1", "title": "Vitamin D and bone density", "text": "Vitamin D supplements increase bone density in older adults."},
        {"_id": "2", "title": "Statins", "text": "Statins lower LDL cholesterol and cardiovascular risk."},
        {"_id": "3", "title": "Sleep", "text": "Short sleep duration is associated with obesity in children."},
    ]
    with gzip.open(root / "corpus.jsonl.gz", "wt") as handle:
        handle.write("\n".join(json.dumps(d) for d in docs))
    queries = [{"_id": "q1", "text": "statins reduce LDL cholesterol"}, {"_id": "q2", "text": "sleep and obesity in children"}]
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\t2\t1\nq2\t3\t1\n")
    return root


def test_eval_beir_cli_all_modes(tiny_beir, tmp_path, monkeypatch):
    from citadel.cli.main import app

    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CITADEL_EMBEDDING__BACKEND", "hash")
    result = CliRunner().invoke(app, ["eval", "beir", "--data", str(tiny_beir), "--mode", "all", "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert [r["mode"] for r in rows] == ["bm25", "dense", "hybrid", "hybrid+rerank"]
    for row in rows:
        assert set(row) == {"mode", "ndcg@10", "recall@100", "mrr@10", "queries", "p50_ms"}
        assert row["queries"] == 2 and row["ndcg@10"] == 1.0 and row["recall@100"] == 1.0
    single = CliRunner().invoke(app, ["eval", "beir", "--data", str(tiny_beir), "--mode", "bm25", "--json"])
    assert json.loads(single.stdout)["mode"] == "bm25"
