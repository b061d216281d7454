"""Runs on the agentic path over the four handbooks: multi-part questions' p50 and steps per run,
parallel against sequential step execution, and single-shot through a run against `ask` directly.

The multi-part questions join two answerable questions of one tenant from the paraphrase set
(tests/regression/paraphrase, written in employees' words) with " Also, " — two needs that one retrieval
rarely serves, which is what the agentic path is for. In process (no HTTP, no Ray): the same orchestrator
the runs API drives, over an in-memory run store, real MiniLM, extractive generator, rules planner. Then
the single-shot comparison again over real HTTP on loopback (uvicorn in this process, the SQLite run
store, the runs API's event stream against POST /v1/answer).

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
import threading
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


def simple_questions(wiring: Wiring) -> list[dict]:
    """Answerable questions the router sends down the single-shot path."""
    rows = [json.loads(line) for tenant in TENANTS
            for line in (PARAPHRASES / f"{tenant}.jsonl").read_text().splitlines() if line]
    items = [{"tenant": r["tenant"], "user": r["user"], "groups": r["groups"], "question": r["question"]}
             for r in rows if r["expect"] == "answer" and wiring.router.route(r["question"]).path == "simple"]
    return items[:SINGLE_SHOT_QUESTIONS]


def single_shot(wiring: Wiring) -> dict:
    """The same simple questions answered by `ask` and by a run, in process."""
    items = simple_questions(wiring)
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


def single_shot_http(config, items: list[dict], repeats: int) -> dict:
    """The same simple questions over real HTTP on loopback (uvicorn, fused in-process services, SQLite
    run store, answer cache off): POST /v1/answer against a run (POST a message, read its event stream
    until `final`), interleaved question by question so drift hits both alike."""
    import httpx
    import uvicorn

    from citadel.identity.context import sign_user_context
    from citadel.identity.credentials import ALL_TENANTS, add_credential
    from citadel.identity.keys import current_service_key
    from serving.http.api import create_api
    from serving.services.compose import build_services

    config = config.model_copy(deep=True)
    config.state.answer_cache_enabled = False  # both paths compute every answer
    token = add_credential(config.credentials_path, "agent-bench", [ALL_TENANTS])
    key = current_service_key(config.service_keys_path, "agent-bench", create=True)
    server = uvicorn.Server(uvicorn.Config(create_api(build_services(config)), host="127.0.0.1", port=0,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]

    def headers(item: dict) -> dict:
        context = sign_user_context(key, item["tenant"], item["user"], item["groups"], 600, config.identity.audience,
                                    int(time.time()))
        return {"authorization": f"Bearer {token}", "x-citadel-user-context": context}

    def ask(client: httpx.Client, item: dict) -> float:
        started = time.perf_counter()
        response = client.post("/v1/answer", json={"question": item["question"]}, headers=headers(item))
        response.raise_for_status()
        return time.perf_counter() - started

    def through_run(client: httpx.Client, item: dict) -> float:
        conversation = client.post("/v1/conversations", headers=headers(item)).json()["conversation_id"]
        started = time.perf_counter()
        posted = client.post(f"/v1/conversations/{conversation}/messages", json={"content": item["question"]},
                             headers=headers(item))
        posted.raise_for_status()
        with client.stream("GET", f"/v1/runs/{posted.json()['run_id']}/events", headers=headers(item)) as stream:
            for line in stream.iter_lines():
                if line == "event: final":
                    break
        return time.perf_counter() - started

    asked, ran = [], []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60.0) as client:
            for item in items:  # warm-up: both paths, every question once
                ask(client, item), through_run(client, item)
            for repeat in range(repeats):
                for index, item in enumerate(items):
                    first, second = (ask, through_run) if (index + repeat) % 2 == 0 else (through_run, ask)
                    for measure in (first, second):
                        (asked if measure is ask else ran).append(measure(client, item))
    finally:
        server.should_exit = True
        thread.join(30)
    ask_p50, run_p50 = statistics.median(asked), statistics.median(ran)
    return {"questions": len(items), "samples_each": len(asked), "ask_p50_ms": round(ask_p50 * 1000, 1),
            "run_p50_ms": round(run_p50 * 1000, 1), "run_vs_ask": round(run_p50 / ask_p50, 3)}


def _principal(item: dict) -> Principal:
    return Principal(item["tenant"], item["user"], frozenset(item["groups"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--http-repeats", type=int, default=3, help="Samples per question over HTTP (0: skip).")
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
    if args.http_repeats:
        result["single_shot_http"] = single_shot_http(config, simple_questions(wiring), args.http_repeats)
    print(json.dumps(result, indent=1 if args.json else None))


if __name__ == "__main__":
    main()
