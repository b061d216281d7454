"""Every Planner runs the planner suite (tests/conformance/suites/planner.py): the rules backend
and the OpenAI-compatible one against a chat-completions server on 127.0.0.1 whose "model" answers
in JSON mode from the request, deterministically: a plan of one search step per question of the
message; a reflection that continues while steps are pending, finishes on evidence, else searches
for the question."""

from __future__ import annotations

import json
import re
import socket

import pytest

from citadel.agent.planner import PLAN_SYSTEM, OpenAICompatiblePlanner, RulesPlanner
from tests.chat_server import ChatServer, completion
from tests.conformance.suites.planner import PlannerConformance

QUESTION_LINE = re.compile(r"^Question: (.*)$", re.M)
TOOLS_LINE = re.compile(r"^Tools: (.*)$", re.M)
PENDING_LINE = re.compile(r"^Planned steps not yet run: (.*)$", re.M)
DONE_WHEN_LINE = re.compile(r"^Done when: (.*)$", re.M)
EVIDENCE = re.compile(r"<<<EVIDENCE>>>\n(.*?)\n?<<<END EVIDENCE>>>", re.S)


def planning_model(body: dict) -> tuple[int, dict]:
    system, user = (message["content"] for message in body["messages"][:2])
    if system == PLAN_SYSTEM:
        reply = _plan(QUESTION_LINE.search(user).group(1), TOOLS_LINE.search(user).group(1).split(", "))
    else:
        reply = _reflect(user)
    return 200, completion(json.dumps(reply), {"total_tokens": 50})


def _plan(question: str, tools: list[str]) -> dict:
    """One search step per question; a model asked for a plan always proposes its search."""
    asks = [part.strip() + "?" for part in question.split("?") if part.strip()] or [question]
    steps = [{"id": f"q{i}", "ask": ask.strip(), "tool": "search", "args": {"query": ask.strip()}, "needs": []}
             for i, ask in enumerate(asks, 1)]
    return {"steps": steps, "done_when": [ask.strip() for ask in asks]}


def _reflect(user: str) -> dict:
    pending = PENDING_LINE.search(user).group(1)
    checklist = DONE_WHEN_LINE.search(user).group(1).split("; ")
    if pending != "none":
        return {"sufficient": False, "gaps": checklist, "next": "continue", "next_query": None}
    if EVIDENCE.search(user).group(1).strip():
        return {"sufficient": True, "gaps": [], "next": "finish", "next_query": None}
    return {"sufficient": False, "gaps": checklist, "next": "search", "next_query": checklist[0]}


@pytest.fixture(scope="module")
def model_server():
    with ChatServer(planning_model) as server:
        yield server


class TestRulesPlanner(PlannerConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls):
        return RulesPlanner()


class TestOpenAICompatiblePlanner(PlannerConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, model_server):
        return OpenAICompatiblePlanner(model_server.url, "planner-model", timeout=5)

    @pytest.fixture
    def broken(self):
        with socket.socket() as probe:  # a loopback port nothing listens on once the probe closes
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        return OpenAICompatiblePlanner(f"http://127.0.0.1:{port}", "m", timeout=2)
