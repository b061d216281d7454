"""The drill catalog (loadtests/drills/*.yaml) and how a verdict is judged, on made-up traffic."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from loadtests.drills.inject import FaultLog
from loadtests.drills.scenario import DrillScenario, catalog, find_scenario, load_scenario
from loadtests.drills.traffic import FILLER_WORDS, Outcome, numbered
from loadtests.drills.verdict import checks, is_error, recovery_s, timeline

ISSUE_DRILLS = {"replica-kill", "node-kill", "slow-generator", "permissions-down", "redis-down", "reranker-down",
                "retry-storm", "dead-letter-backlog"}


def test_the_catalog_holds_every_drill_and_each_one_checks_something():
    found = catalog()
    assert set(found) == ISSUE_DRILLS
    for name, path in found.items():
        scenario = load_scenario(path)
        assert scenario.name == name and scenario.description
        assert scenario.expect.model_dump(exclude_defaults=True), name  # at least one expectation
        assert scenario.load.total_s <= 120, name  # the whole catalog runs in minutes


def test_unknown_drills_and_unbounded_specs_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown drill"):
        find_scenario("meteor-strike")
    with pytest.raises(ValidationError):
        DrillScenario.model_validate({"name": "long", "fault": {"kind": "node_kill", "node": "w1"},
                                      "load": {"before_s": 1000, "fault_s": 1000, "after_s": 1000}})
    with pytest.raises(ValidationError):
        DrillScenario.model_validate({"name": "x", "fault": {"kind": "stage"}})  # which stage?


def _scenario(**expect) -> DrillScenario:
    return DrillScenario.model_validate({"name": "t", "settle_s": 1.0, "fault": {"kind": "stage", "stage": "catalog"},
                                         "load": {"before_s": 10, "fault_s": 10, "after_s": 10}, "expect": expect})


def _log() -> FaultLog:
    return FaultLog(fault_at_s=10.0, fault_end_s=20.0)


def test_an_expected_refusal_is_no_error_inside_the_fault_and_its_grace_only():
    scenario = _scenario(expected_error_codes=["permissions_unavailable"], expected_grace_s=5)
    refusal = dict(endpoint="retrieve", status=503, code="permissions_unavailable")
    assert not is_error(Outcome(sent_s=12, done_s=12.1, **refusal), scenario, _log())
    assert not is_error(Outcome(sent_s=24, done_s=24.1, **refusal), scenario, _log())  # in the grace
    assert is_error(Outcome(sent_s=26, done_s=26.1, **refusal), scenario, _log())
    assert is_error(Outcome(sent_s=5, done_s=5.1, **refusal), scenario, _log())
    assert is_error(Outcome("retrieve", 12, 12.1, 500, "internal_error"), scenario, _log())


def test_recovery_counts_from_the_fault_end_to_the_last_second_with_a_5xx():
    scenario = _scenario(recovery_s=5)
    outcomes = [Outcome("retrieve", t, t + 0.05, 200) for t in range(30)]
    outcomes += [Outcome("retrieve", 22.5, 22.6, 503, "x"), Outcome("retrieve", 15, 15.1, 503, "x")]
    rows = timeline(outcomes, scenario, _log())
    assert recovery_s(rows, scenario, _log()) == 3.0  # the bad second 22 ends at 23
    [found] = checks(outcomes, rows, scenario, _log(), None)
    assert found["passed"] and found["measured"] == 3.0


def test_a_passage_returned_while_the_permission_store_is_down_is_a_leak():
    scenario = _scenario(max_leaks=0, fault_statuses=[503])
    outcomes = [Outcome("retrieve", 12, 12.1, 503, "permissions_unavailable"),
                Outcome("answer", 13, 13.2, 200, passages=2)]
    leaks, statuses = (c for c in checks(outcomes, timeline(outcomes, scenario, _log()), scenario, _log(), None)
                       if c["check"].startswith(("passages", "responses")))
    assert not statuses["passed"] and statuses["measured"] == 1
    assert not leaks["passed"] and leaks["measured"] == 1


def test_numbered_questions_differ_only_in_function_words():
    first, second = numbered("What is the hotel limit?", 1), numbered("What is the hotel limit?", 2)
    assert first != second and first.startswith("What is the hotel limit? ")
    assert set(first.split()[5:]) <= set(FILLER_WORDS)


def test_a_stall_counts_against_recovery_in_the_drills_that_kill():
    """Requests held by a dead node's replicas until Serve replaces them come back late but 2xx: with
    no latency limit the drill would call the stall recovered (the node-kill drill did, before)."""
    for name in ("node-kill", "replica-kill"):
        assert find_scenario(name).expect.slo_p95_ms, f"{name} does not judge latency: a stall would pass"
    scenario = find_scenario("node-kill")
    log = FaultLog(fault_at_s=10.0, fault_end_s=40.0)
    outcomes = [Outcome("retrieve", t / 4, t / 4 + 0.2, 200) for t in range(4 * 60) if not 60 <= t < 100]
    outcomes += [Outcome("retrieve", 15.0, 45.5, 200)] * 4  # sent at 15 s, held until 45.5 s
    rows = timeline(outcomes, scenario, log)
    assert recovery_s(rows, scenario, log) == 46.0 - 10.0  # from the fault's start to the end of 45 s
    [errors, recovery] = checks(outcomes, rows, scenario, log, None)
    assert errors["passed"] and not recovery["passed"]
