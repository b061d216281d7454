"""Runs on the agentic path over the four handbooks (issue 15): multi-part questions' p50 and steps per run,
parallel against sequential step execution, and single-shot through a run against `ask` directly.

The multi-part questions join two answerable questions of one tenant from the paraphrase set
(tests/regression/paraphrase, written in employees' words) with " Also, " — two needs that one retrieval
rarely serves, which is what the agentic path is for. In process (no HTTP, no Ray): the same orchestrator
the runs API drives, over an in-memory run store, real MiniLM, extractive generator, rules planner.

    python benchmarks/agent_bench.py --home HOME [--questions 24] [--json]

HOME is an ingested home with the tenants 18f, civicactions, sourcegraph and github (e.g. the one
`citadel eval rag` builds).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections import Counter
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citadel.config import load_config  # noqa: E402
from citadel.state.runs import MemoryRunStore, Run  # noqa: E402
from citadel.types import Principal  # noqa: E402
from citadel.wiring import Wiring  # noqa: E402

PARAPHRASES = ROOT / "tests" / "regression" / "paraphrase"
TENANTS = ("18f", "civicactions", "sourcegraph", "github")
SINGLE_SHOT_QUESTIONS = 12


def multi_part_questions(count: int) -> list[dict]:
    """Pairs of answerable questions of one tenant, round-robin over the tenants, joined into one."""
    by_tenant = {}
    for tenant in TENANTS:
        rows = [json.loads(line) for line in (PARAPHRASES / f"{tenant}.jsonl").read_text().splitlines() if line]
        by_tenant[tenant] = [r for r in rows if r["expect"] == "answer"]
    questions = []
    for index in itertools.count():
        tenant = TENANTS[index % len(TENANTS)]
        rows = by_tenant[tenant]
        first, second = rows[(2 * (index // len(TENANTS))) % len(rows)], rows[(2 * (index // len(TENANTS)) + 1) % len(rows)]
        questions.append({"tenant": tenant, "groups": first["groups"], "user": first["user"],
                          "question": f"{first['question'].rstrip()} Also, {second['question'][0].lower()}"
                                      f"{second['question'][1:]}"})
        if len(questions) == count:
            return questions


def orchestrator_for(wiring: Wiring, store: MemoryRunStore, parallel: int):
    """The wiring's orchestrator over `store`, running at most `parallel` steps at once."""
    orchestrator = wiring.make_orchestrator(store)
    orchestrator.config = orchestrator.config.model_copy(update={"max_parallel_steps": parallel})
    return orchestrator


def drive(orchestrator, store: MemoryRunStore, item: dict) -> tuple[float, dict]:
    """One run to its end; (seconds, what the run recorded about itself)."""
    run = store.create(Run(uuid.uuid4().hex, item["tenant"], item["user"], "bench", item["question"],
                           groups=tuple(item["groups"])))
    started = time.perf_counter()
    finished = orchestrator.drive(run.run_id, "bench")
    seconds = time.perf_counter() - started
    steps = sum(key.startswith("step:") for key in store.steps(run.run_id))
    return seconds, {"path": finished.path, "status": str(finished.status), "stop": finished.stop_reason,
                     "steps": steps}


def agentic(wiring: Wiring, questions: list[dict], parallel: int) -> dict:
    store = MemoryRunStore(time.time)
    orchestrator = orchestrator_for(wiring, store, parallel)
    results = [drive(orchestrator, store, q) for q in questions]
    seconds = [s for s, _ in results]
    return {"parallel": parallel, "runs": len(results), "p50_ms": round(statistics.median(seconds) * 1000, 1),
            "steps_per_run": round(statistics.mean(r["steps"] for _, r in results), 2),
            "agentic_runs": sum(r["path"] == "agentic" for _, r in results),
            "stop_reasons": dict(Counter(r["stop"] or "none" for _, r in results))}


def single_shot(wiring: Wiring) -> dict:
    """The same simple questions (the ones the router sends down the single-shot path) answered by
    `ask` and by a run."""
    rows = [json.loads(line) for tenant in TENANTS
            for line in (PARAPHRASES / f"{tenant}.jsonl").read_text().splitlines() if line]
    items = [{"tenant": r["tenant"], "user": r["user"], "groups": r["groups"], "question": r["question"]}
             for r in rows if r["expect"] == "answer" and wiring.router.route(r["question"]).path == "simple"]
    items = items[:SINGLE_SHOT_QUESTIONS]
    store = MemoryRunStore(time.time)
    for item in items:  # warm both paths alike: the query-vector and word memos hold every question after this
        wiring.answer_service.ask(_principal(item), item["question"])
    asked, through_runs, paths = [], [], []
    for item in items:
        started = time.perf_counter()
        wiring.answer_service.ask(_principal(item), item["question"])
        asked.append(time.perf_counter() - started)
    orchestrator = orchestrator_for(wiring, store, wiring.config.agent.max_parallel_steps)
    for item in items:
        seconds, record = drive(orchestrator, store, item)
        through_runs.append(seconds)
        paths.append(record["path"])
    ask_p50, run_p50 = statistics.median(asked), statistics.median(through_runs)
    return {"questions": len(items), "single_shot_runs": paths.count("single_shot"),
            "ask_p50_ms": round(ask_p50 * 1000, 1), "run_p50_ms": round(run_p50 * 1000, 1),
            "run_vs_ask": round(run_p50 / ask_p50, 3)}


def _principal(item: dict) -> Principal:
    return Principal(item["tenant"], item["user"], frozenset(item["groups"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    config = load_config(environ={"CITADEL_HOME": str(args.home), "CITADEL_EMBEDDING__BACKEND": "minilm",
                                  "CITADEL_ANSWER__GENERATOR": "extractive", "CITADEL_ANSWER__RERANKER": "none"})
    wiring = Wiring(config)
    questions = multi_part_questions(args.questions)
    agentic(wiring, questions[:2], 4)  # warm-up: model load, partitions, glossaries
    parallel, sequential = agentic(wiring, questions, 4), agentic(wiring, questions, 1)
    result = {"agentic_parallel": parallel, "agentic_sequential": sequential,
              "sequential_vs_parallel_p50": round(sequential["p50_ms"] / parallel["p50_ms"], 3),
              "single_shot": single_shot(wiring)}
    print(json.dumps(result, indent=1 if args.json else None))


if __name__ == "__main__":
    main()
