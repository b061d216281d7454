"""The run loop (citadel/agent/orchestrator.py) on a tiny home with the hash embedder: routing, the
single-shot path, parallel steps, the five stopping rules, cancellation, conflicts resolved from
catalog metadata, a planner that fails, and crash-and-resume with each step run once."""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from citadel.agent.executor import ToolStepExecutor
from citadel.agent.orchestrator import Orchestrator, run_outcome, token_pieces
from citadel.agent.plan import parse_plan
from citadel.agent.planner import OpenAICompatiblePlanner, RulesPlanner
from citadel.errors import NotFound
from citadel.ingest.sources import AclSpec, discover
from citadel.state.runs import EventType, MemoryRunStore, Run, RunStatus
from citadel.types import Principal
from tests.unit.test_agent_planner import ScriptedChatServer

STAFF = Principal("t", "u1", frozenset({"staff"}))
HASH_GATE = {"min_vector_score": 0.0, "strong_vector_score": 0.9}
TODAY = "2026-06-01"

TRAVEL = """---
id: travel
title: Travel policy
effective_date: 2024-01-01
---
# Travel policy

## Booking

Employees book flights through the travel desk at least 14 days before departure. Economy class is the
default for flights under 6 hours.

## Approval

Every trip needs approval from your manager before booking. Contractors need approval from the
contracting officer instead of a manager.

## Per diem

The per diem for meals is $75 per day in domestic cities. Receipts are required for lodging.
"""
LAPTOPS = """---
id: laptops
title: Laptop policy
---
# Laptop policy

## Requesting a laptop

New staff request a laptop by filing a ticket with IT support. Laptops are delivered within 5 business days.

## Lost equipment

Report a lost or stolen laptop to the security team within 24 hours.
"""
DISCOUNT_2025 = """---
id: discount-2025
title: Discount policy 2025
effective_date: 2025-01-01
---
# Discount policy 2025

## Standard discount

Sales representatives may offer a standard discount of up to 15% on annual contracts.
"""
DISCOUNT_2026 = """---
id: discount-2026
title: Discount policy 2026
effective_date: 2026-01-01
---
# Discount policy 2026

## Standard discount

Sales representatives may offer a standard discount of up to 12% on annual contracts.

## Larger discounts

Any larger discount needs approval from the regional sales director.
"""

TWO_PARTS = "Who approves travel for contractors and how do new staff request a laptop?"
WITH_A_GAP = "Who approves travel for contractors and what is the kayak rental allowance?"
KAYAK_PART = "what is the kayak rental allowance"


class ManualClock:
    """Time moves only when the test says so (the run store's leases and the run's deadline)."""

    def __init__(self) -> None:
        self.t = 1_000.0

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class CountingExecutor:
    """The real executor, counting executions per step and calling `before(step)` first."""

    def __init__(self, before=None):
        self.inner = ToolStepExecutor()
        self.before = before
        self.counts: Counter[str] = Counter()
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()

    def execute(self, context, step, tools):
        with self._lock:
            self.counts[step.id] += 1
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            if self.before is not None:
                self.before(step)
            return self.inner.execute(context, step, tools)
        finally:
            with self._lock:
                self.running -= 1


class ScriptedPlanner:
    """Plans from a fixed JSON plan; reflects with the rules."""

    def __init__(self, plan: dict):
        self._plan = plan
        self.rules = RulesPlanner()

    def plan(self, question, context):
        return parse_plan(self._plan, context.tools, context.known_ids, context.check_args)

    def reflect(self, question, plan, evidence):
        return self.rules.reflect(question, plan, evidence)


@dataclass
class Harness:
    runtime: object
    store: MemoryRunStore
    clock: ManualClock

    def start(self, question: str, run_id: str = "run-1") -> str:
        self.store.create(Run(run_id, "t", "u1", "c1", question, groups=("staff",)))
        return run_id

    def orchestrator(self, **options) -> Orchestrator:
        return self.runtime.make_orchestrator(self.store, clock=self.clock, today=lambda: TODAY, **options)

    def events(self, run_id: str = "run-1"):
        return self.store.events(run_id)

    def final(self, run_id: str = "run-1") -> dict:
        [final] = [e for e in self.events(run_id) if e.type == EventType.FINAL]
        return final.data

    def progress(self, stage: str, run_id: str = "run-1") -> list[dict]:
        return [e.data for e in self.events(run_id) if e.type == EventType.PROGRESS and e.data.get("stage") == stage]


def write_corpus(root: Path) -> Path:
    directory = root / "corpus"
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (("travel.md", TRAVEL), ("laptops.md", LAPTOPS), ("discount-2025.md", DISCOUNT_2025),
                       ("discount-2026.md", DISCOUNT_2026)):
        (directory / name).write_text(text)
    return directory


@pytest.fixture
def agent(make_runtime, tmp_path):
    def build(**agent_settings) -> Harness:
        runtime = make_runtime(answer=HASH_GATE, agent=agent_settings)
        corpus = discover([write_corpus(tmp_path)], trust_front_matter=True)
        runtime.ingestor().ingest("t", corpus, AclSpec.from_groups(["staff"]))
        clock = ManualClock()
        return Harness(runtime, MemoryRunStore(clock.now), clock)

    return build


def assert_clean_log(harness: Harness, run_id: str = "run-1") -> None:
    """Seqs 1..n with no gap, every event key once, one terminal event and it is the last."""
    events = harness.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    keys = [e.data["key"] for e in events]
    assert len(keys) == len(set(keys)), [k for k, n in Counter(keys).items() if n > 1]
    terminal = [e for e in events if e.type in (EventType.FINAL, EventType.ERROR)]
    assert len(terminal) == 1 and terminal[0] is events[-1]


def streamed_answer(harness: Harness, run_id: str = "run-1") -> str:
    return "".join(e.data["text"] for e in harness.events(run_id) if e.type == EventType.TOKEN)


# ----------------------------------------------------------------------------- routing and the single-shot path


def test_a_simple_question_takes_the_single_shot_path_with_the_same_answer(agent):
    harness = agent()
    run_id = harness.start("Who approves travel for contractors?")
    run = harness.orchestrator().drive(run_id, "replica-a")
    expected = harness.runtime.answer_service.ask(STAFF, "Who approves travel for contractors?")
    final = harness.final()
    assert run.status == RunStatus.SUCCEEDED and run.path == "single_shot" and run.stop_reason is None
    assert final["answer"] == expected.answer and "contracting officer" in final["answer"]
    assert final["citations"] == expected.citations and final["path"] == "single_shot"
    assert final["outcome"] == expected.outcome == "answered" and not final["refused"]
    assert harness.store.steps(run_id)["answer"]["outcome"] == "answered" == run_outcome(harness.store.steps(run_id))
    assert streamed_answer(harness) == final["answer"]
    citations = [e.data for e in harness.events() if e.type == EventType.CITATION]
    assert [c["document_id"] for c in citations] == [c["document_id"] for c in final["citations"]]
    assert harness.progress("route")[0]["path"] == "single_shot"
    assert_clean_log(harness)


def test_a_refused_question_is_answered_by_the_single_shot_path(agent):
    harness = agent()
    run = harness.orchestrator().drive(harness.start("Can I bring my dog to the kayak offsite?"), "a")
    final = harness.final()
    assert run.status == RunStatus.SUCCEEDED and final["refused"] and final["reason"] == "low_coverage"
    assert final["outcome"] == "refused" == run_outcome(harness.store.steps("run-1"))
    assert final["missing"]  # the gate's missing terms
    assert_clean_log(harness)


@pytest.mark.parametrize("refused, reason, outcome", [
    (False, None, "answered"), (True, "not_confirmed", "not_confirmed"), (True, "low_coverage", "refused")])
def test_an_answer_recorded_before_answers_carried_an_outcome_is_delivered_with_one(agent, refused, reason, outcome):
    """A run resumed after its answer was recorded by an older driver (no "outcome" in the record):
    the final event derives it from refused and reason."""
    harness = agent()
    run_id = harness.start("What is the lodging per diem in Denver?")
    citation = {"chunk_id": "travel:3", "document_id": "travel", "title": "Travel policy", "version": 1,
                "heading": "Per diem", "page": None, "source": "travel.md"}
    harness.store.record_step(run_id, "route", {"path": "single_shot"})
    harness.store.record_step(run_id, "answer", {"answer": "…", "refused": refused, "reason": reason,
                                                 "citations": [citation], "conflicts": [], "degraded": [],
                                                 "missing": [], "tokens": 0})
    assert run_outcome(harness.store.steps(run_id)) == outcome
    harness.orchestrator().drive(run_id, "a")
    final = harness.final()
    assert final["outcome"] == outcome and final["refused"] is refused and final["reason"] == reason
    assert final["citations"] == [citation]
    assert_clean_log(harness)


def test_a_run_has_no_outcome_before_it_answers(agent):
    harness = agent()
    run_id = harness.start("Who approves travel for contractors?")
    assert run_outcome(harness.store.steps(run_id)) is None


def test_unknown_and_finished_runs(agent):
    harness = agent()
    with pytest.raises(NotFound):
        harness.orchestrator().drive("nope", "a")
    run_id = harness.start("Who approves travel for contractors?")
    harness.orchestrator().drive(run_id, "a")
    before = len(harness.events())
    assert harness.orchestrator().drive(run_id, "b").status == RunStatus.SUCCEEDED
    assert len(harness.events()) == before


# ----------------------------------------------------------------------------- the agentic path


def test_a_multi_part_question_runs_its_independent_steps_in_parallel(agent):
    barrier = threading.Barrier(2, timeout=10)  # passes only if both steps are running at the same time
    executor = CountingExecutor(before=lambda step: barrier.wait())
    harness = agent(max_parallel_steps=4)
    run = harness.orchestrator(executor=executor).drive(harness.start(TWO_PARTS), "a")
    steps = harness.progress("step")
    assert run.path == "agentic" and run.status == RunStatus.SUCCEEDED
    assert [s["status"] for s in steps] == ["ok", "ok"] and executor.most_running == 2
    [plan] = harness.progress("plan")
    assert [s["needs"] for s in plan["steps"]] == [[], []]
    assert plan["done_when"] == ["Who approves travel for contractors", "how do new staff request a laptop"]
    final = harness.final()
    assert "contracting officer" in final["answer"] and "ticket" in final["answer"]
    assert final["missing"] == [] and final["stop_reason"] is None and final["steps"] == 2
    assert streamed_answer(harness) == final["answer"]
    assert harness.progress("reflection")[0]["skipped"]  # the top passages covered every term
    assert_clean_log(harness)


def test_max_parallel_steps_one_runs_them_one_at_a_time(agent):
    executor = CountingExecutor()
    harness = agent(max_parallel_steps=1)
    harness.orchestrator(executor=executor).drive(harness.start(TWO_PARTS), "a")
    assert executor.most_running == 1 and sum(executor.counts.values()) == 2


def test_conflicting_versions_are_resolved_from_catalog_metadata_and_reported(agent):
    """Two published editions of one policy (a `supersedes` would have retired the old one at publish):
    the later effective date already in force applies, and the answer says so."""
    harness = agent()
    harness.orchestrator().drive(harness.start(
        "What is the standard discount on annual contracts and who approves larger discounts?"), "a")
    final = harness.final()
    [conflict] = [c for c in final["conflicts"] if c.get("resolved_to")]
    assert conflict["kind"] == "effective_dates" and conflict["resolved_to"] == "discount-2026"
    assert set(conflict["document_ids"]) == {"discount-2025", "discount-2026"}
    assert "12%" in final["answer"] and "15%" not in final["answer"]
    assert 'Resolved: "Discount policy 2026" applies over "Discount policy 2025"' in final["answer"]
    assert "discount-2025" not in {c["document_id"] for c in final["citations"]}
    assert_clean_log(harness)


# ----------------------------------------------------------------------------- the five stopping rules


def assert_stopped(harness: Harness, reason: str, missing_part: str = KAYAK_PART) -> dict:
    run = harness.store.get("run-1")
    final = harness.final()
    assert run.status == RunStatus.STOPPED and run.stop_reason == reason
    assert final["stop_reason"] == reason and missing_part in final["missing"]
    assert [p["reason"] for p in harness.progress("stopped")] == [reason]
    assert_clean_log(harness)
    return final


def test_step_cap_stops_the_run_and_names_what_is_missing(agent):
    harness = agent(step_cap=1, max_parallel_steps=1)
    plan = {"steps": [{"id": "s1", "ask": "Who approves travel for contractors", "tool": "search",
                       "args": {"query": "Who approves travel for contractors"}},
                      {"id": "s2", "ask": KAYAK_PART, "tool": "search", "args": {"query": KAYAK_PART}}],
            "done_when": ["Who approves travel for contractors", KAYAK_PART]}
    harness.orchestrator(planner=ScriptedPlanner(plan)).drive(harness.start(WITH_A_GAP), "a")
    final = assert_stopped(harness, "step_cap")
    assert final["steps"] == 1 and "contracting officer" in final["answer"]  # it answers with what it found
    assert final["answer"].endswith(f"could not confirm: {KAYAK_PART}.")  # and says what it lacks


@pytest.mark.parametrize("limits, reason", [({"token_budget": 50}, "token_budget"),
                                            ({"cost_budget": 0.0001}, "cost_budget")])
def test_the_token_or_cost_budget_stops_the_run(agent, limits, reason):
    harness = agent(max_parallel_steps=1, **limits)
    harness.orchestrator().drive(harness.start(WITH_A_GAP), "a")
    final = assert_stopped(harness, reason)
    assert final["steps"] == 1 and not final["refused"]


def test_the_deadline_stops_the_run(agent):
    clock_holder = {}

    def slow_step(step):  # the first step takes longer than the whole run may
        clock_holder["clock"].advance(11.0)

    harness = agent(deadline_s=10.0, max_parallel_steps=1)
    clock_holder["clock"] = harness.clock
    executor = CountingExecutor(before=slow_step)
    harness.orchestrator(executor=executor).drive(harness.start(WITH_A_GAP), "a")
    final = assert_stopped(harness, "deadline")
    assert dict(executor.counts) == {"s1": 1} and final["steps"] == 1
    assert "contracting officer" in final["answer"]


def chain(query: str, top_ks: list[int], done_when: list[str]) -> dict:
    """Steps each needing the one before (one per round), all the same search with smaller top_k:
    each later round can only find passages the first one already found."""
    steps = [{"id": f"s{i}", "ask": query, "tool": "search", "args": {"query": query, "top_k": k},
              "needs": [f"s{i - 1}"] if i > 1 else []} for i, k in enumerate(top_ks, start=1)]
    return {"steps": steps, "done_when": done_when}


def test_no_new_evidence_in_two_rounds_stops_the_run(agent):
    harness = agent()
    planner = ScriptedPlanner(chain("contractor travel approval", [8, 4, 2, 1],
                                    ["who approves contractor travel", KAYAK_PART]))
    harness.orchestrator(planner=planner).drive(harness.start(WITH_A_GAP), "a")
    final = assert_stopped(harness, "no_new_evidence")
    assert final["steps"] == 3  # rounds 2 and 3 added nothing; s4 never ran
    assert [r["action"] for r in harness.progress("reflection")] == ["continue", "continue", "continue"]


def test_a_repeated_identical_call_stops_the_run(agent):
    harness = agent()
    plan = chain("contractor travel approval", [8, 8], ["who approves contractor travel", KAYAK_PART])
    executor = CountingExecutor()
    harness.orchestrator(planner=ScriptedPlanner(plan), executor=executor).drive(harness.start(WITH_A_GAP), "a")
    final = assert_stopped(harness, "repeated_call")
    assert dict(executor.counts) == {"s1": 1} and final["steps"] == 1


def test_the_rules_never_repeat_a_search_and_name_the_part_the_documents_never_answer(agent):
    harness = agent()
    run = harness.orchestrator().drive(harness.start(WITH_A_GAP), "a")
    final = harness.final()
    # "kayak rental allowance" is the part's own search again: the rules have nothing new to try
    assert run.status == RunStatus.SUCCEEDED and final["stop_reason"] is None
    assert final["missing"] == [KAYAK_PART] and final["steps"] == 2
    assert "contracting officer" in final["answer"] and final["answer"].endswith(f"could not confirm: {KAYAK_PART}.")
    # the two discount editions it also found are not a conflict about this question
    assert "Resolved" not in final["answer"] and final["conflicts"] == []
    assert all(r["conflicts"] == [] for r in harness.progress("reflection"))
    assert_clean_log(harness)


def test_cancellation_is_checked_between_steps(agent):
    harness = agent(max_parallel_steps=1)
    orchestrator = harness.orchestrator(after_step=lambda run_id, step_id: harness.store.request_cancel(run_id))
    run = orchestrator.drive(harness.start(WITH_A_GAP), "a")
    final = harness.final()
    assert run.status == RunStatus.CANCELLED and final["stop_reason"] == "cancelled" and final["steps"] == 1
    assert final["answer"] == "" and final["refused"] and KAYAK_PART in final["missing"]
    assert final["outcome"] == "refused"
    assert_clean_log(harness)


# ----------------------------------------------------------------------------- the planner's server


def test_a_plan_from_the_server_drives_the_run(agent):
    harness = agent()
    plan = {"steps": [{"id": "travel", "ask": "Who approves contractor travel?", "tool": "search",
                       "args": {"query": "contractor travel approval"}, "needs": []},
                      {"id": "laptop", "ask": "How do new staff get a laptop?", "tool": "search",
                       "args": {}, "needs": []}],
            "done_when": ["who approves contractor travel", "how new staff request a laptop"]}
    reflection = {"sufficient": True, "conflicts": [], "gaps": [], "next": "finish", "next_query": None}
    with ScriptedChatServer(json.dumps(plan), json.dumps(reflection)) as server:
        planner = OpenAICompatiblePlanner(server.url, "m", timeout=5)
        harness.orchestrator(planner=planner).drive(harness.start(TWO_PARTS), "a")
    assert sorted(s["step_id"] for s in harness.progress("step")) == ["laptop", "travel"]
    assert harness.final()["stop_reason"] is None and harness.store.get("run-1").path == "agentic"
    assert_clean_log(harness)


def test_a_planner_invalid_twice_falls_back_to_the_single_shot_path_and_says_so(agent):
    harness = agent()
    with ScriptedChatServer("not json", json.dumps({"steps": "none"})) as server:
        planner = OpenAICompatiblePlanner(server.url, "m", timeout=5)
        run = harness.orchestrator(planner=planner).drive(harness.start(TWO_PARTS), "a")
    assert len(server.requests) == 2
    [fallback] = harness.progress("fallback")
    assert fallback["to"] == "single_shot" and "invalid twice" in fallback["reason"]
    expected = harness.runtime.answer_service.ask(STAFF, TWO_PARTS)
    assert run.path == "single_shot" and run.status == RunStatus.SUCCEEDED
    assert harness.final()["answer"] == expected.answer and harness.final()["path"] == "single_shot"
    assert_clean_log(harness)


# ----------------------------------------------------------------------------- crash and resume


class Killed(BaseException):
    """Stands in for the process dying: no `except Exception` sees it, no cleanup runs."""


def test_a_driver_killed_between_steps_is_continued_by_another_once_the_lease_expires(agent):
    harness = agent(max_parallel_steps=1, lease_ttl_s=30.0)
    executor = CountingExecutor()

    def die_after_first_step(run_id, step_id):
        raise Killed(step_id)

    run_id = harness.start(TWO_PARTS)
    with pytest.raises(Killed):
        harness.orchestrator(executor=executor, after_step=die_after_first_step).drive(run_id, "replica-a")
    assert dict(executor.counts) == {"s1": 1}
    seen_before = len(harness.events())
    # The lease is still replica-a's: another replica leaves the run alone until it expires.
    assert harness.orchestrator(executor=executor).drive(run_id, "replica-b").status == RunStatus.RUNNING
    assert len(harness.events()) == seen_before
    harness.clock.advance(31.0)
    run = harness.orchestrator(executor=executor).drive(run_id, "replica-b")
    assert run.status == RunStatus.SUCCEEDED
    assert dict(executor.counts) == {"s1": 1, "s2": 1}  # each step ran once
    assert [s["step_id"] for s in harness.progress("step")] == ["s1", "s2"]
    assert len(harness.progress("plan")) == 1 and len(harness.progress("started")) == 1
    final = harness.final()
    assert "contracting officer" in final["answer"] and "ticket" in final["answer"] and final["steps"] == 2
    assert_clean_log(harness)
    # A third drive of the finished run changes nothing.
    harness.orchestrator(executor=executor).drive(run_id, "replica-c")
    assert sum(executor.counts.values()) == 2 and harness.events()[-1].type == EventType.FINAL


def test_a_driver_killed_after_the_answer_was_recorded_streams_it_once(agent):
    harness = agent()
    run_id = harness.start(TWO_PARTS)
    orchestrator = harness.orchestrator()
    original = orchestrator._deliver
    calls = []

    def deliver_then_die(state, record, stop, path):
        calls.append(1)
        if len(calls) == 1:
            orchestrator._emit(state, EventType.TOKEN, "token:0", {"text": token_pieces(record["answer"])[0]})
            raise Killed("mid-stream")
        return original(state, record, stop, path)

    orchestrator._deliver = deliver_then_die
    with pytest.raises(Killed):
        orchestrator.drive(run_id, "a")
    harness.clock.advance(harness.runtime.config.agent.lease_ttl_s + 1)
    executor = CountingExecutor()
    harness.orchestrator(executor=executor).drive(run_id, "b")
    assert sum(executor.counts.values()) == 0  # everything but the delivery was recorded
    assert streamed_answer(harness) == harness.final()["answer"]
    assert_clean_log(harness)


def test_a_driver_whose_lease_was_taken_stops_writing_and_the_new_owner_finishes(agent):
    harness = agent(max_parallel_steps=1, lease_ttl_s=30.0)
    executor = CountingExecutor()

    def lease_taken(run_id, step_id):  # the driver stalls past its lease; another replica adopts the run
        harness.clock.advance(31.0)
        assert harness.store.acquire(run_id, "replica-b", 30.0)

    run_id = harness.start(TWO_PARTS)
    harness.orchestrator(executor=executor, after_step=once(lease_taken)).drive(run_id, "replica-a")
    assert dict(executor.counts) == {"s1": 1} and not harness.progress("stopped")
    assert [e.type for e in harness.events()][-1] == EventType.PROGRESS  # replica-a wrote nothing more
    run = harness.orchestrator(executor=executor).drive(run_id, "replica-b")
    assert run.status == RunStatus.SUCCEEDED and dict(executor.counts) == {"s1": 1, "s2": 1}
    assert_clean_log(harness)


def once(hook):
    """Run `hook` after the first step only."""
    calls = []

    def first_only(run_id, step_id):
        calls.append(step_id)
        if len(calls) == 1:
            hook(run_id, step_id)

    return first_only


class FailingExecutor(CountingExecutor):
    def execute(self, context, step, tools):
        if step.id == "s2":
            raise RuntimeError("the tool crashed")
        return super().execute(context, step, tools)


def test_a_failed_step_is_recorded_and_the_run_answers_with_the_rest(agent):
    harness = agent()
    run = harness.orchestrator(executor=FailingExecutor()).drive(harness.start(WITH_A_GAP), "a")
    steps = {s["step_id"]: s for s in harness.progress("step")}
    assert steps["s2"]["status"] == "failed" and steps["s2"]["error"] == "internal_error"
    assert steps["s1"]["status"] == "ok" and run.status in (RunStatus.STOPPED, RunStatus.SUCCEEDED)
    final = harness.final()
    assert "contracting officer" in final["answer"] and KAYAK_PART in final["missing"]
    assert_clean_log(harness)


class BrokenExecutor(CountingExecutor):
    def execute(self, context, step, tools):
        raise RuntimeError("every tool is down")


def test_a_run_that_found_nothing_says_so_and_names_every_part_missing(agent):
    harness = agent()
    harness.orchestrator(executor=BrokenExecutor()).drive(harness.start(TWO_PARTS), "a")
    final = harness.final()
    assert final["refused"] and final["reason"] == "no_eligible_source" and final["citations"] == []
    assert final["missing"] == ["Who approves travel for contractors", "how do new staff request a laptop"]
    assert final["stop_reason"] is None and final["steps"] == 2  # each search failed once, none was repeated
    assert_clean_log(harness)


def test_an_error_outside_any_step_fails_the_run_with_an_error_event(agent):
    from citadel.errors import PermissionsUnavailable

    harness = agent()

    class Unreachable:
        def ask(self, *args, **kwargs):
            raise PermissionsUnavailable("the permission store cannot be read")

        router = harness.runtime.answer_service.router

    orchestrator = harness.orchestrator()
    orchestrator.answers = Unreachable()
    run = orchestrator.drive(harness.start("Who approves travel for contractors?"), "a")
    [error] = [e for e in harness.events() if e.type == EventType.ERROR]
    assert run.status == RunStatus.FAILED and error.data["code"] == "permissions_unavailable"
    assert_clean_log(harness)
    assert harness.store.acquire("run-1", "someone-else", 30.0)  # the failed driver let its lease go


def test_the_wiring_builds_the_planner_and_the_orchestrator(make_runtime):
    runtime = make_runtime()
    assert isinstance(runtime.planner, RulesPlanner)
    assert runtime.agent_tools.names() == ("search",)
    orchestrator = runtime.make_orchestrator(MemoryRunStore(ManualClock().now))
    assert isinstance(orchestrator, Orchestrator) and orchestrator.config is runtime.config.agent
