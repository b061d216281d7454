"""`POST /v1/chat/completions` (model `citadel`) against `POST /v1/answer` for the same questions, over real
HTTP on loopback, and the time to the first streamed chunk.

The Acme examples are ingested into a scratch home (real MiniLM, the extractive generator: the
defaults), served by uvicorn in this process (fused in-process services). Every question is asked of
both routes, interleaved and alternating which goes first so drift hits both alike, in two phases:
the answer cache off (both compute every answer) and on (both are cache hits: what the chat route adds
on top is most visible there; five times the rounds). Then each question streamed: the first byte (OpenAI's role chunk), the
first text chunk, and the whole stream, for `citadel` and for `citadel-agent` (a run's token events).
Budgets are raised so the benchmark is not refused part-way.

    python benchmarks/chat_vs_answer.py [--rounds 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citadel.config import load_config  # noqa: E402

EXAMPLES = ROOT / "examples" / "acme"
QUESTIONS = ["What is the hotel limit per night in London?", "How much is reimbursed for home office equipment?",
             "Who approves expenses above the limit?", "What standard discount can sales offer?",
             "How many days per week may staff work remotely?", "What is the per diem for meals when travelling?"]
USER = {"tenant": "acme", "user": "chat-bench", "groups": ["staff"]}


def p50_ms(seconds: list[float]) -> float:
    return round(statistics.median(seconds) * 1000, 2)


def build_home(root: Path, cache: bool):
    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.embedding.factory import make_embedder
    from citadel.ingest.local import Ingestor
    from citadel.ingest.sources import AclSpec, discover

    config = load_config(environ={"CITADEL_HOME": str(root), "CITADEL_STATE__ANSWER_CACHE_ENABLED": str(cache).lower(),
                                  "CITADEL_STATE__BUDGET_REQUESTS_PER_DAY": "1000000",
                                  "CITADEL_STATE__BUDGET_COST_PER_DAY": "1000000"})
    if not config.catalog_path.exists():
        catalog = SQLiteCatalog(config.catalog_path)
        files = [f for f in discover([EXAMPLES], trust_front_matter=True) if "travel-policy-v2" not in f.source]
        Ingestor(catalog, make_embedder(config.embedding), config).ingest("acme", files,
                                                                           AclSpec.from_file(EXAMPLES / "acl.yaml"))
        catalog.close()
    return config


class Gateway:
    """The API served by uvicorn on a thread, on a free port of 127.0.0.1, with a signed caller."""

    def __init__(self, config):
        import uvicorn

        from citadel.identity.credentials import ALL_TENANTS, add_credential
        from citadel.identity.keys import current_service_key
        from serving.http.api import create_api
        from serving.services.compose import build_services

        self.config = config
        self.token = add_credential(config.credentials_path, "chat-bench", [ALL_TENANTS])
        self.key = current_service_key(config.service_keys_path, "chat-bench", create=True)
        self.services = build_services(config)
        self.server = uvicorn.Server(uvicorn.Config(create_api(self.services), host="127.0.0.1", port=0,
                                                    log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "Gateway":
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"
        return self

    def __exit__(self, *_) -> None:
        self.services.runs.wait_for_runs(60)
        self.server.should_exit = True
        self.thread.join(10)

    def headers(self) -> dict:
        from citadel.identity.context import sign_user_context

        context = sign_user_context(self.key, USER["tenant"], USER["user"], USER["groups"], 600,
                                    self.config.identity.audience, int(time.time()))
        return {"authorization": f"Bearer {self.token}", "x-citadel-user-context": context}


def timed(call) -> float:
    started = time.perf_counter()
    response = call()
    if response.status_code != 200:
        raise SystemExit(f"{response.status_code} {response.text}")
    return time.perf_counter() - started


def compare(gateway: Gateway, rounds: int) -> dict:
    """p50 of each route over the same questions, interleaved, alternating which goes first."""
    import httpx

    headers = gateway.headers()
    answer, chat = [], []
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=60) as client:
        def ask_answer(question: str) -> float:
            return timed(lambda: client.post("/v1/answer", json={"question": question}))

        def ask_chat(question: str) -> float:
            return timed(lambda: client.post("/v1/chat/completions", json={
                "model": "citadel", "messages": [{"role": "user", "content": question}]}))

        for question in QUESTIONS:  # warm-up (and, with the cache on, fills it)
            ask_answer(question), ask_chat(question)
        for index in range(rounds):
            for question in QUESTIONS:
                if index % 2:
                    answer.append(ask_answer(question)), chat.append(ask_chat(question))
                else:
                    chat.append(ask_chat(question)), answer.append(ask_answer(question))
    return {"requests_per_route": len(answer), "answer_p50_ms": p50_ms(answer), "chat_p50_ms": p50_ms(chat),
            "chat_vs_answer": round(statistics.median(chat) / statistics.median(answer), 3),
            # each question's two asks side by side: robust to the machine's load changing under the run
            "paired_ratio_p50": round(statistics.median(c / a for c, a in zip(chat, answer)), 3)}


def first_chunks(gateway: Gateway, model: str, rounds: int) -> dict:
    """Time to the first chunk (the role chunk), to the first text, and to `[DONE]`."""
    import httpx

    first, text, done = [], [], []
    with httpx.Client(base_url=gateway.url, headers=gateway.headers(), timeout=60) as client:
        for _ in range(rounds):
            for question in QUESTIONS:
                started = time.perf_counter()
                seen_text = None
                with client.stream("POST", "/v1/chat/completions", json={
                        "model": model, "stream": True, "messages": [{"role": "user", "content": question}]}) as r:
                    r.raise_for_status()
                    for line in r.iter_lines():
                        if not line.startswith("data: "):
                            continue
                        now = time.perf_counter() - started
                        if len(first) < len(done) + 1:
                            first.append(now)
                        if line == "data: [DONE]":
                            done.append(now)
                            break
                        if seen_text is None and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                            seen_text = now
                            text.append(now)
    return {"streams": len(done), "first_chunk_p50_ms": p50_ms(first), "first_text_p50_ms": p50_ms(text),
            "done_p50_ms": p50_ms(done)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="times each question is asked of each route")
    parser.add_argument("--json", action="store_true", help="one JSON line instead of a table")
    args = parser.parse_args()
    results = {"questions": len(QUESTIONS)}
    with tempfile.TemporaryDirectory(prefix="chat-bench-") as scratch:
        for phase, cache in (("cache_off", False), ("cache_on", True)):
            with Gateway(build_home(Path(scratch) / "home", cache)) as gateway:  # ingested once
                # cache hits take a few ms: five times the rounds, for a p50 above the machine's noise
                results[phase] = compare(gateway, args.rounds * (5 if cache else 1))
                if not cache:  # streams that compute their answer
                    results["stream_citadel"] = first_chunks(gateway, "citadel", max(1, args.rounds // 2))
                    results["stream_citadel_agent"] = first_chunks(gateway, "citadel-agent", max(1, args.rounds // 2))
    if args.json:
        print(json.dumps(results))
        return
    for name, row in results.items():
        print(f"{name:22} {row}")


if __name__ == "__main__":
    main()
