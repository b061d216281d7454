"""The reader stage's cost: p50 of rescoring 8 / 30 / 50 real handbook passages, torch fp32
against ONNX Runtime int8, side by side in one run; the resident memory each runtime adds; the
artefact's size; and the p50 of a whole `ask` with the reader (rerank + confirm + quotes) against
without it, on the same home.

    python benchmarks/reader_latency.py --home DIR [--threads 2] [--rounds 15]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from citadel.config import load_config  # noqa: E402
from citadel.reader.network import ARTEFACT_DIR, WEIGHTS_FILE  # noqa: E402
from citadel.reader.trained import TrainedReader  # noqa: E402
from citadel.rerank.base import rerank_text  # noqa: E402
from citadel.types import Principal  # noqa: E402
from citadel.wiring import Wiring  # noqa: E402

QUESTIONS = ["How many sick days can I use to care for a family member?", "Who approves my travel before I book?",
             "What is the lodging per diem when I travel to Denver?", "How do I report a lost laptop?",
             "Can I expense a home office chair?", "How far in advance must I request annual leave?"]
SIZES = (8, 30, 50)


def rss_mb() -> float:
    return psutil.Process(os.getpid()).memory_info().rss / 2**20


def passages_for(runtime, question: str, depth: int):
    principal = Principal("18f", "bench", frozenset({"staff"}))
    return runtime.retriever.retrieve(principal, question, top_k=depth).passages


def p50(values):
    return round(statistics.median(values) * 1000.0, 1)


def stage_costs(runtime, threads: int, rounds: int) -> dict:
    pools = {q: [rerank_text(p) for p in passages_for(runtime, q, max(SIZES))] for q in QUESTIONS}
    results = {}
    for name in ("torch", "onnx"):
        gc.collect()
        before = rss_mb()
        reader = TrainedReader(runtime=name, threads=threads)
        reader.score(QUESTIONS[0], pools[QUESTIONS[0]][:8])  # warm-up
        results[name] = {"rss_added_mb": round(rss_mb() - before, 1)}
        for size in SIZES:
            times = []
            for round_ in range(rounds):
                question = QUESTIONS[round_ % len(QUESTIONS)]
                texts = pools[question][:size]
                started = time.perf_counter()
                reader.score(question, texts)
                times.append(time.perf_counter() - started)
            results[name][f"p50_ms_{size}"] = p50(times)
        del reader
    return results


def ask_costs(home: str, rounds: int) -> dict:
    out = {}
    for label, env in (("without reader", {"CITADEL_ANSWER__CONFIRM": "false", "CITADEL_ANSWER__RERANKER": "none"}),
                       ("with reader", {"CITADEL_ANSWER__CONFIRM": "true", "CITADEL_ANSWER__RERANKER": "reader"})):
        config = load_config(environ={"CITADEL_HOME": home, "CITADEL_EMBEDDING__BACKEND": "minilm", **env})
        runtime = Wiring(config=config)
        principal = Principal("18f", "bench", frozenset({"staff"}))
        service = runtime.answer_service
        service.ask(principal, QUESTIONS[0])
        totals, stages = [], {}
        for round_ in range(rounds):
            response = service.ask(principal, QUESTIONS[round_ % len(QUESTIONS)] + " " * (round_ // len(QUESTIONS)))
            totals.append(response.timings_ms["total"] / 1000.0)
            for stage, ms in response.timings_ms.items():
                stages.setdefault(stage, []).append(ms / 1000.0)
        out[label] = {"p50_total_ms": p50(totals), "stages_p50_ms": {k: p50(v) for k, v in stages.items()}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    config = load_config(environ={"CITADEL_HOME": args.home, "CITADEL_EMBEDDING__BACKEND": "minilm",
                                  "CITADEL_ANSWER__CONFIRM": "false"})
    runtime = Wiring(config=config)
    report = {"artefact_bytes": (ARTEFACT_DIR / WEIGHTS_FILE).stat().st_size, "threads": args.threads,
              "reader_stage": stage_costs(runtime, args.threads, args.rounds), "ask": ask_costs(args.home, args.rounds)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
