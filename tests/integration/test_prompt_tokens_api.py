"""One prompt path over HTTP: /v1/answer with an OpenAI-compatible model server on
127.0.0.1. Every answer's system message is the same bytes whatever the question (the prefix a
provider caches), the task comes last, and the prompt tokens the server says it served from its
cache are counted in `citadel_prompt_tokens_total` and kept in the answer log."""

from __future__ import annotations

import concurrent.futures
import re

from fastapi.testclient import TestClient

from citadel.prompting.prompt import SYSTEM_PROMPT, TASK_INSTRUCTION
from tests.chat_server import ChatServer, completion
from tests.integration.conftest import make_home

FIRST_SOURCE = re.compile(r"<<<SOURCE 1>>>\n.*?\n\n(.*?)\n<<<END SOURCE 1>>>", re.S)
# The server's cache served the system message's tokens: the same on every call, as a provider's would.
CACHED, PROMPT = 96, 400


def quote_first_source(body: dict) -> tuple[int, dict]:
    """Source 1's first sentence, cited, with a usage block like vLLM's."""
    text = FIRST_SOURCE.search(body["messages"][1]["content"]).group(1)
    usage = {"prompt_tokens": PROMPT, "completion_tokens": 12, "prompt_tokens_details": {"cached_tokens": CACHED}}
    return 200, completion(f"{text.split('. ')[0].rstrip('.')}. [1]", usage)


def test_answers_share_their_cached_prefix_and_count_cached_prompt_tokens(tmp_path):
    from serving.http.api import create_api
    from serving.services.compose import build_services

    questions = ("What is the hotel limit per night in London?",
                 "What is the mileage rate for personal car use on business trips?")
    with ChatServer(quote_first_source) as server:
        home = make_home(tmp_path / "home", CITADEL_ANSWER__GENERATOR="openai_compatible",
                         CITADEL_ANSWER__OPENAI_BASE_URL=server.url, CITADEL_ANSWER__OPENAI_MODEL="served")
        app = create_api()
        app.state.services = build_services(home.config)
        app.state.executor = concurrent.futures.ThreadPoolExecutor(2)
        with TestClient(app) as client:
            bodies = [client.post("/v1/answer", json={"question": q}, headers=home.headers()).json()
                      for q in questions]
            metrics = client.get("/metrics", headers=home.metrics_headers()).text
            logged = app.state.services.wiring.catalog.answer_log()
    assert [b["outcome"] for b in bodies] == ["answered", "answered"], bodies
    assert all(b["degraded"] in ([], ["rerank_skipped"]) for b in bodies), "the model server answered both"
    systems = [r["body"]["messages"][0]["content"] for r in server.requests]
    users = [r["body"]["messages"][1]["content"] for r in server.requests]
    assert len(server.requests) == 2 and systems == [SYSTEM_PROMPT, SYSTEM_PROMPT]
    assert users[0] != users[1]
    for question, user in zip(questions, users):
        assert user.endswith(f"Question: {question}\n\n{TASK_INSTRUCTION}") and "Status: published" in user
    assert f'citadel_prompt_tokens_total{{kind="cached"}} {2.0 * CACHED}' in metrics
    assert f'citadel_prompt_tokens_total{{kind="uncached"}} {2.0 * (PROMPT - CACHED)}' in metrics
    counted = {"cached": CACHED, "uncached": PROMPT - CACHED}
    assert [row["response"]["prompt_tokens"] for row in logged[-2:]] == [counted, counted], "kept in the answer log"
