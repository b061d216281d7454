"""People as capacity (capacity/reviewers.py): per-team volumes from the traffic, utilisation, the M/M/c
wait, the load at which a team's queue grows without bound, and the machines' figure beside it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from capacity import reviewers, sizing
from capacity.workload import LimitsSpec, PeopleSpec, ReviewTeamSpec, TrafficSpec, Workload, load_workload

REPO = Path(__file__).resolve().parents[3]
AGENTIC = REPO / "cluster" / "workloads" / "agentic-400m.yaml"

# 1,000 questions a day, 40% of them agentic runs: 400 runs.
TRAFFIC = TrafficSpec(questions_per_day=1_000, simple_share=0.6)


def _workload(*teams: ReviewTeamSpec, honeypot_rate: float = 0.1) -> Workload:
    return Workload(traffic=TRAFFIC, people=PeopleSpec(honeypot_rate=honeypot_rate, teams=list(teams)))


def _team(**fields) -> ReviewTeamSpec:
    return ReviewTeamSpec(**({"name": "deal-desk"} | fields))


def test_volumes_come_from_the_traffic() -> None:
    team = _team(t2_approvals_per_run=0.1, t1_audits_per_run=0.05, failed_checks_per_question=0.01,
                 answer_audits_per_question=0.02)
    volumes = reviewers.team_volumes(_workload(team), team)
    assert volumes.approvals == pytest.approx(40)  # 400 runs x 0.1
    assert volumes.honeypots == pytest.approx(4)  # a twin for 10% of the approvals
    assert volumes.t1_audits == pytest.approx(20)  # 400 runs x 0.05
    assert volumes.failed_checks == pytest.approx(10)  # 1,000 answers x 0.01
    assert volumes.answer_audits == pytest.approx(20)  # 1,000 answers x 0.02
    assert volumes.review_tasks == pytest.approx(54) and volumes.decisions == pytest.approx(94)
    assert reviewers.team_volumes(_workload(team), team, 3.0).decisions == pytest.approx(3 * 94)


def test_doubling_the_reviewers_doubles_the_load_they_can_take() -> None:
    small = _team(t2_approvals_per_run=0.1, reviewers=2, hours_per_day=4, minutes_per_decision=6)
    double = small.model_copy(update={"reviewers": 4})
    # 44 decisions a day against 2 x 4 h x 10/h = 80: busy 55%, unbounded at 80/44.
    assert reviewers.team_utilisation(_workload(small), small) == pytest.approx(44 / 80)
    first = reviewers.team_saturation_multiplier(_workload(small), small)
    assert first == pytest.approx(80 / 44)
    assert reviewers.team_saturation_multiplier(_workload(double), double) == pytest.approx(2 * first)
    assert reviewers.team_utilisation(_workload(small), small, first) == pytest.approx(1.0)


def test_a_team_with_nothing_to_decide_never_saturates() -> None:
    idle = _team(name="legal", reviewers=1)
    workload = _workload(idle)
    assert reviewers.team_saturation_multiplier(workload, idle) == sizing.MAX_LOAD_MULTIPLIER
    assert reviewers.team_utilisation(workload, idle, 500.0) == 0.0
    assert reviewers.team_mean_wait_minutes(workload, idle) == 0.0
    nobody = _team(t2_approvals_per_run=0.1, reviewers=0)
    assert reviewers.team_saturation_multiplier(_workload(nobody), nobody) == 0.0


def test_the_wait_is_an_mm1_queue_for_one_reviewer() -> None:
    # 4 decisions over 4 hours: 1/h arriving, 30 minutes each (2/h served): Wq = rho / (mu - lambda) = 0.5 h.
    one = _team(name="legal", failed_checks_per_question=0.004, reviewers=1, hours_per_day=4,
                minutes_per_decision=30)
    workload = _workload(one)
    assert reviewers.team_mean_wait_minutes(workload, one) == pytest.approx(30.0)
    assert reviewers.team_mean_wait_minutes(workload, one, 2.0) == float("inf")


def test_machines_saturate_where_their_busy_share_reaches_one() -> None:
    workload = load_workload(AGENTIC)
    tiers = sizing.workload_tiers(workload)
    machines = sizing.machine_saturation_report(workload, tiers)
    replicas = sizing.replica_report(workload, tiers)
    assert machines["retriever_replicas"]["as_sized"] == pytest.approx(1 / replicas["utilisation_at_peak"])
    # 5 shards x 4 slots: the cores hold 3 replicas per shard, the 1.5 TB of RAM only 2.
    assert sizing.max_replicas_per_shard(workload, tiers) == 2
    roomy = workload.model_copy(update={"limits": LimitsSpec(cluster_ram_bytes=1e13)})
    assert sizing.max_replicas_per_shard(roomy, tiers) == 3
    gpus = machines["query_gpus"]
    assert gpus["at_limits"] == pytest.approx(workload.limits.query_gpus / sizing.query_gpu_busy(workload))
    assert gpus["as_sized"] < gpus["at_limits"]  # the plan sizes 2 of the 4 GPUs there are
    quota = sizing.generator_report(workload)["quota_utilisation_at_peak"]
    assert machines["generator_quota"]["at_limits"] == pytest.approx(1 / quota)


def test_default_people_fall_behind_before_the_machines() -> None:
    people = reviewers.people_report(load_workload(AGENTIC))
    assert set(people["teams"]) == {"deal-desk", "legal", "finance", "security", "knowledge-owners"}
    # Seed 003 §12: at about 3x load Deal Desk is the first team behind, before any server.
    assert people["first_team"]["name"] == "deal-desk"
    assert people["first_team"]["at_load_multiplier"] == pytest.approx(3.03, abs=0.01)
    assert people["team_before_machines"] is True
    assert people["first_machine"]["name"] == "query_gpus"
    # The provider's token quota (a contract, not a machine) runs out earlier still.
    assert people["first_to_fall"] == {"name": "generator_quota", "kind": "provider quota",
                                       "at_load_multiplier": pytest.approx(1.32, abs=0.01)}
    then = people["machines_when_first_team_saturates"]
    assert then["needs"]["query_gpus"]["fits"] and not then["needs"]["generator_quota"]["fits"]


def test_the_people_section_rejects_typos_and_duplicates(tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("people:\n  teams:\n    - name: deal-desk\n      reviewer: 3\n", encoding="utf-8")
    with pytest.raises(ValidationError, match="reviewer"):
        load_workload(typo)
    section = tmp_path / "section.yaml"
    section.write_text("people:\n  honeypot_share: 0.01\n", encoding="utf-8")
    with pytest.raises(ValidationError, match="honeypot_share"):
        load_workload(section)
    twice = tmp_path / "twice.yaml"
    twice.write_text("people:\n  teams:\n    - {name: legal}\n    - {name: legal}\n", encoding="utf-8")
    with pytest.raises(ValidationError, match="unique"):
        load_workload(twice)


def test_every_team_field_is_documented() -> None:
    assert all(field.description for field in ReviewTeamSpec.model_fields.values())
