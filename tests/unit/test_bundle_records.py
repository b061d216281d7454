"""Runs record the config bundle (DESIGN.md §11): the run's stored answer and its final event name it,
on the single-shot and the agentic path; a run resumed under another config names the one that answered."""

from __future__ import annotations

import pytest

from tests.unit.test_agent_orchestrator import TWO_PARTS, agent  # noqa: F401  (the fixture)


@pytest.mark.parametrize("question, path", [("Who approves travel for contractors?", "single_shot"),
                                            (TWO_PARTS, "agentic")])
def test_a_run_names_its_bundle(agent, question, path):  # noqa: F811
    harness = agent()
    run = harness.orchestrator().drive(harness.start(question), "a")
    bundle_id = harness.runtime.bundle.id
    assert run.path == path and bundle_id.startswith("b-")
    assert harness.final()["bundle_id"] == bundle_id
    assert harness.store.steps(run.run_id)["answer"]["bundle_id"] == bundle_id


def test_a_resumed_run_names_the_bundle_that_answered(agent):  # noqa: F811
    harness = agent()
    run_id = harness.start("Who approves travel for contractors?")
    harness.store.record_step(run_id, "answer", {"answer": "x", "refused": False, "reason": None, "citations": [],
                                                 "conflicts": [], "degraded": [], "missing": [],
                                                 "bundle_id": "b-000000000001"})
    harness.orchestrator().drive(run_id, "a")
    assert harness.final()["bundle_id"] == "b-000000000001"
