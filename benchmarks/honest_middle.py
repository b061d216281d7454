"""The paraphrase set's outcomes and the trade-off over confirmation operating points.

Answers every item of one split on a home built by `citadel eval rag` (the four handbook tenants,
real MiniLM), writes each item's outcome, citations and what the confirmation read, and computes the
curve over (reader probability, subject share) operating points from those records without answering
again: asserted with the expected section cited; expected fact present among asserted (in the
confirming sentence); unanswerables not asserted; expected section offered at all. Also the ROC AUC of
each confirmation feature and gate signal (answerable vs not) on the split. Tune on dev; report test.

    CITADEL_HOME=DIR python benchmarks/honest_middle.py --split dev [--out items.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citadel.eval import rag  # noqa: E402
from citadel.wiring import Wiring  # noqa: E402

PROBABILITIES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
SHARES = (0.0, 0.25, 0.5, 0.75)
CLOSEST = 3


def item_record(result) -> dict:
    item = result.item
    return {"id": item.id, "answerable": item.answerable, "expected_documents": list(item.expected_documents),
            "expected_heading": item.expected_heading, "expected_answer": list(item.expected_answer),
            "reply": result.reply, "reason": result.reason, "cited_correctly": result.cited_correctly,
            "offered": result.offered, "facts_found": result.facts_found, "stage": result.stage,
            "signals": result.signals, "confirmation": result.confirmation,
            "cited": [f"{c['document_id']} | {c.get('heading')}" for c in result.cited]}


def _evidence(row: dict, record: dict) -> bool:
    heading = (record["expected_heading"] or "").lower()
    return row["document_id"] in record["expected_documents"] and heading in str(row["heading"] or "").lower()


def point(records: list[dict], probability: float, share: float) -> dict:
    """The four figures at one operating point, recomputed from the recorded sentences."""
    answerable = [r for r in records if r["answerable"]]
    unanswerable = [r for r in records if not r["answerable"]]
    asserted, cited, facts, offered, not_asserted = 0, 0, 0, 0, 0
    for record in records:
        confirmation = record["confirmation"]
        sentences = confirmation["sentences"] if confirmation else []
        qualified = [s for s in sentences if s["holds_slot"] and s["subject_share"] >= share
                     and s["probability"] >= probability]
        confirmed = bool(qualified)
        if not record["answerable"]:
            not_asserted += not confirmed
            continue
        if confirmed:
            best = max(qualified, key=lambda s: s["probability"])
            asserted += 1
            cited += _evidence(best, record)
            facts += rag.contains_facts(best["text"], record["expected_answer"]) if record["expected_answer"] else 1
            offered += _evidence(best, record)
        elif confirmation:
            closest = max(sentences, key=lambda s: s["probability"]) if sentences else None
            rows = ([closest] if closest else []) + confirmation["sources"]
            offered += any(_evidence(row, record) for row in rows[:CLOSEST])
    return {"probability": probability, "subject_share": share,
            "asserted_with_section_cited": round(cited / max(1, len(answerable)), 3),
            "fact_in_asserted": round(facts / max(1, asserted), 3),
            "unanswerable_not_asserted": round(not_asserted / max(1, len(unanswerable)), 3),
            "section_offered": round(offered / max(1, len(answerable)), 3)}


def feature_aucs(records: list[dict]) -> dict:
    from citadel.reader.training import auc

    labels = [float(r["answerable"]) for r in records]
    names = set()
    for r in records:
        names |= set((r["confirmation"] or {}).get("features", {})) | set(r["signals"] or {})
    values = {}
    for name in sorted(names):
        scores = [((r["confirmation"] or {}).get("features", {}) | (r["signals"] or {})).get(name, 0.0) for r in records]
        values[name] = auc(labels, scores)
    return values


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--split", default="dev", help="dev | test | all (a set without splits)")
    parser.add_argument("--set", default=str(rag.PARAPHRASE_SET), help="the labeled set (default: the paraphrase set)")
    parser.add_argument("--out")
    args = parser.parse_args()
    runtime = Wiring()
    items = rag.load_set(args.set, None if args.split == "all" else args.split)
    rag.build_tenants(runtime, rag.SHARED_DATA, rag.DEFAULT_OVERLAY)
    started = time.perf_counter()
    results = rag.evaluate_results(runtime, items, by_stage=True)
    records = [item_record(r) for r in results]
    report = {"split": args.split, "items": len(records), "seconds": round(time.perf_counter() - started, 1),
              "reader": getattr(runtime.reader, "model_id", None), "reranker": runtime.reranker.model_id,
              **rag.honest_middle(results), "stages": rag.stage_table(results)["lost_at"],
              "leaks": sum(len(r.leaks) for r in results), "errors": sum(r.error is not None for r in results),
              "unsupported_claim_rate": rag.summarise(results)["unsupported_claim_rate"],
              "aucs": feature_aucs(records),
              "curve": [point(records, p, s) for p in PROBABILITIES for s in SHARES]}
    if args.out:
        Path(args.out).write_text(json.dumps({"report": report, "items": records}, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
