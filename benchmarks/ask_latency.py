"""Per-stage latency of one `ask` on the 18F handbook tenant: real MiniLM on one torch thread,
extractive generator, no reranker. Ingests the handbook once into benchmarks/out/ask-latency (later
runs reuse it; `--home DIR` uses another home, e.g. one `citadel eval rag` built), asks 8 questions
twice after a warm-up, and prints the median of each stage in ms. The stages are the ones `ask`
times: route, embed, search, rerank, semantic (the question's words embedded for the gate), gate (the
decision itself), expand, generate, validate, total.

    python benchmarks/ask_latency.py [--home DIR]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citadel.wiring import Wiring  # noqa: E402
from citadel.config import load_config  # noqa: E402
from citadel.ingest.sources import AclSpec, discover  # noqa: E402
from citadel.types import Principal  # noqa: E402

HOME = ROOT / "benchmarks" / "out" / "ask-latency"
CORPUS = ROOT.parent / "shared" / "data" / "corpora" / "18f-handbook"
TENANT = "18f"
QUESTIONS = ["How do I request leave?", "What is the travel approval process?", "How are laptops secured?",
             "Who approves purchases with a micro-purchase card?", "How do I set up two-factor authentication?",
             "What is the policy on working from home?", "How do I get a PIV card?", "What are core hours?"]
ROUNDS = 2


def main() -> None:
    home = Path(sys.argv[sys.argv.index("--home") + 1]) if "--home" in sys.argv else HOME
    if not CORPUS.exists():
        sys.exit(f"the 18F handbook is not at {CORPUS} (see ../shared/data/SOURCES.md)")
    config = load_config(environ={"CITADEL_HOME": str(home), "CITADEL_EMBEDDING__BACKEND": "minilm",
                                  "CITADEL_EMBEDDING__TORCH_THREADS": "1", "CITADEL_ANSWER__GENERATOR": "extractive",
                                  "CITADEL_ANSWER__RERANKER": "none"})
    wiring = Wiring(config)
    report = wiring.ingestor().ingest(TENANT, discover([CORPUS]), AclSpec.from_groups(["*"]))
    principal = Principal(TENANT, "latency-bench", frozenset())
    # Both gates side by side in one run: the hand-set default and the calibrated one.
    services = {"thresholds": wiring.answer_service,
                "calibrated": Wiring(config.model_copy(update={"answer": config.answer.model_copy(
                    update={"gate": "calibrated"})})).answer_service}
    results = {}
    for name, service in services.items():
        service.ask(principal, "warm-up question about annual leave")
        timings = [service.ask(principal, q).timings_ms for q in QUESTIONS * ROUNDS]
        stages = sorted({stage for row in timings for stage in row})
        results[name] = {s: round(statistics.median(row.get(s, 0.0) for row in timings), 2) for s in stages}
    print(json.dumps({"tenant_chunks": report.total_chunks, "asks_per_gate": len(QUESTIONS) * ROUNDS,
                      "median_ms": results}))


if __name__ == "__main__":
    main()
