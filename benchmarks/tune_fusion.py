"""Tune hybrid fusion on BEIR SciFact *train* queries (never test): RRF k and the leg weights.

Legs are computed once per query through Citadel's Retriever; each setting only re-fuses.

    CITADEL_HOME=var/scifact python benchmarks/tune_fusion.py [--split train] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from citadel.wiring import Wiring
from citadel.eval.beir import RECALL_K, ensure_indexed, load_beir
from citadel.eval.metrics import ndcg_at_k
from citadel.retrieval.fusion import reciprocal_rank_fusion
from citadel.types import Principal

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "beir_scifact"
RRF_KS = (10, 20, 40, 60, 100)
VECTOR_WEIGHTS = (0.6, 0.8, 1.0, 1.2, 1.5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--split", default="train")
    parser.add_argument("--tenant", default="beir-scifact")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    wiring = Wiring()
    data = load_beir(DATA, args.split)
    ensure_indexed(wiring, args.tenant, data)
    retriever = wiring.retriever
    partition, allowed = retriever.scope(Principal(args.tenant, "tune", frozenset()))
    documents = partition.table.column("document_id").to_pylist()
    plan = retriever.plan(len(allowed), len(partition))
    legs = {q: retriever.legs(partition, text, allowed, plan, [], {}, k=RECALL_K) for q, text in data.queries.items()}
    results = []
    for rrf_k, weight in itertools.product(RRF_KS, VECTOR_WEIGHTS):
        scores = []
        for query_id, candidates in legs.items():
            fused = reciprocal_rank_fusion([candidates.vector, candidates.keyword], rrf_k, weights=(weight, 1.0))
            ranked = list(dict.fromkeys(documents[row] for row, _ in fused))
            scores.append(ndcg_at_k(ranked, data.qrels[query_id], 10))
        results.append({"rrf_k": rrf_k, "vector_weight": weight, "ndcg@10": round(sum(scores) / len(scores), 4)})
    results.sort(key=lambda r: -r["ndcg@10"])
    if args.json:
        print(json.dumps({"split": args.split, "queries": len(legs), "results": results}, indent=1))
        return
    for row in results[:10]:
        print(row)


if __name__ == "__main__":
    main()
