"""SciFact nDCG@10 with the reader reranker against hybrid alone, side by side in one run.

Indexes SciFact (../shared/data/beir_scifact) once into a home with real MiniLM, takes each query's
fused top `--depth` documents with their fused scores, scores them with the reader once, and computes
nDCG@10 for every blend weight (0 = the reader alone, 1 = the fused order). The weight is chosen on
the train queries (`--train-limit` of them); the test queries are reported at that weight, untouched.

    python benchmarks/reader_scifact.py [--home DIR] [--depth 30] [--train-limit 200] [--runtime onnx]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citadel.config import load_config  # noqa: E402
from citadel.eval import beir  # noqa: E402
from citadel.eval.metrics import ndcg_at_k  # noqa: E402
from citadel.reader.trained import TrainedReader  # noqa: E402
from citadel.rerank.base import rerank_text  # noqa: E402
from citadel.rerank.reader import blended
from citadel.wiring import Wiring  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "beir_scifact"
WEIGHTS = [round(0.1 * i, 1) for i in range(11)]


def scored_heads(ranker, reader, queries: dict[str, str]) -> dict[str, list[tuple[str, float, float]]]:
    """Per query: (document id, fused score, reader probability) of the fused head, fused order."""
    heads = {}
    for query_id, text in queries.items():
        passages = ranker.head(ranker.fused(text))
        probabilities = reader.score(text, [rerank_text(p) for p in passages])
        heads[query_id] = [(p.document_id, p.score, prob) for p, prob in zip(passages, probabilities)]
    return heads


def ndcg(heads, qrels, weight: float) -> float:
    values = []
    for query_id, head in heads.items():
        scores = blended([h[2] for h in head], [h[1] for h in head], weight)
        order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
        values.append(ndcg_at_k([head[i][0] for i in order], qrels[query_id], beir.NDCG_K))
    return round(sum(values) / len(values), 4)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", default=str(ROOT / "benchmarks" / "out" / "scifact"))
    parser.add_argument("--depth", type=int, default=30)
    parser.add_argument("--train-limit", type=int, default=200)
    parser.add_argument("--runtime", default="onnx")
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"SciFact is not at {DATA} (see ../shared/data/SOURCES.md)")
    config = load_config(environ={"CITADEL_HOME": args.home, "CITADEL_EMBEDDING__BACKEND": "minilm"})
    runtime = Wiring(config=config)
    train, test = beir.load_beir(DATA, "train"), beir.load_beir(DATA, "test")
    beir.ensure_indexed(runtime, "beir-scifact", test)
    ranker = beir.ModeRanker(runtime, "beir-scifact", depth=100, rerank_depth=args.depth)
    reader = TrainedReader(runtime=args.runtime)
    started = time.perf_counter()
    train_queries = dict(sorted(train.queries.items())[: args.train_limit])
    train_heads = scored_heads(ranker, reader, train_queries)
    test_heads = scored_heads(ranker, reader, test.queries)
    curve = {w: {"train": ndcg(train_heads, train.qrels, w), "test": ndcg(test_heads, test.qrels, w)} for w in WEIGHTS}
    chosen = max(WEIGHTS, key=lambda w: (curve[w]["train"], w))
    hybrid = beir.evaluate(ranker, test, "hybrid")["ndcg@10"]
    print(json.dumps({"reader": reader.model_id, "depth": args.depth, "train_queries": len(train_queries),
                      "test_queries": len(test.queries), "hybrid_test_ndcg@10": hybrid,
                      "chosen_weight_on_train": chosen, "reader_test_ndcg@10_at_chosen": curve[chosen]["test"],
                      "curve": curve, "seconds": round(time.perf_counter() - started, 1)}, indent=1))


if __name__ == "__main__":
    main()
