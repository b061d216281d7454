"""People as capacity: the approvals and review tasks each team decides, and the load at which its
queue grows without bound, beside the machines' (seed 003 §12: "at 3x load, the first thing to fall
behind is Deal Desk, not a server").

A team is an M/M/c queue: its decisions of a day arrive over its reviewers' working hours, `reviewers`
servers each taking `minutes_per_decision` on average. Utilisation is offered decisions / what the
team can decide in its hours; it reaches 1, and the queue grows without bound, at the load multiple
1 / utilisation (volumes are linear in traffic). Machines scale within the cluster's limits, people do
not, so a team is compared with the machines grown to those limits (`sizing.machine_saturation_report`).
"""

from __future__ import annotations

from dataclasses import dataclass

from capacity import sizing
from capacity.workload import ReviewTeamSpec, Workload

MINUTES_PER_HOUR = 60.0


@dataclass(frozen=True)
class TeamVolumes:
    """One team's tasks per day at some load: approvals (real T2 requests) and review tasks."""

    approvals: float
    honeypots: float
    t1_audits: float
    failed_checks: float
    answer_audits: float

    @property
    def review_tasks(self) -> float:
        return self.honeypots + self.t1_audits + self.failed_checks + self.answer_audits

    @property
    def decisions(self) -> float:
        return self.approvals + self.review_tasks


def team_volumes(workload: Workload, team: ReviewTeamSpec, load_multiplier: float = 1.0) -> TeamVolumes:
    """Tasks per day for `team` from the workload's traffic: actions from agentic runs, checks and
    audits from every answer, honeypot twins from the approvals."""
    runs = sizing.agentic_runs_per_day(workload, load_multiplier)
    questions = sizing.questions_per_day(workload, load_multiplier)
    approvals = runs * team.t2_approvals_per_run
    return TeamVolumes(
        approvals=approvals,
        honeypots=approvals * workload.people.honeypot_rate,
        t1_audits=runs * team.t1_audits_per_run,
        failed_checks=questions * team.failed_checks_per_question,
        answer_audits=questions * team.answer_audits_per_question,
    )


def decisions_per_day_capacity(team: ReviewTeamSpec) -> float:
    """What the team can decide in a day: reviewers x hours x decisions per hour."""
    return team.reviewers * team.hours_per_day * MINUTES_PER_HOUR / team.minutes_per_decision


def team_utilisation(workload: Workload, team: ReviewTeamSpec, load_multiplier: float = 1.0) -> float:
    offered = team_volumes(workload, team, load_multiplier).decisions
    capacity = decisions_per_day_capacity(team)
    if offered <= 0:
        return 0.0
    return offered / capacity if capacity > 0 else float("inf")


def team_saturation_multiplier(workload: Workload, team: ReviewTeamSpec) -> float:
    """Load multiple at which the team's queue grows without bound (sizing.MAX_LOAD_MULTIPLIER: never)."""
    return sizing.saturation_multiplier(decisions_per_day_capacity(team),
                                        team_volumes(workload, team).decisions)


def team_mean_wait_minutes(workload: Workload, team: ReviewTeamSpec, load_multiplier: float = 1.0) -> float:
    """Mean time a task waits for a reviewer within working hours (Erlang C); inf once saturated."""
    decisions = team_volumes(workload, team, load_multiplier).decisions
    if decisions <= 0:
        return 0.0
    if team.reviewers == 0:
        return float("inf")
    arrival_per_s = decisions / (team.hours_per_day * sizing.SECONDS_PER_HOUR)
    service_s = team.minutes_per_decision * MINUTES_PER_HOUR
    return sizing.mmc_mean_wait_s(arrival_per_s, service_s, team.reviewers) / MINUTES_PER_HOUR


def _team_report(workload: Workload, team: ReviewTeamSpec) -> dict:
    volumes = team_volumes(workload, team)
    return {
        "approvals_per_day": volumes.approvals,
        "review_tasks_per_day": volumes.review_tasks,
        "review_tasks": {"honeypots": volumes.honeypots, "t1_audits": volumes.t1_audits,
                         "failed_checks": volumes.failed_checks, "answer_audits": volumes.answer_audits},
        "decisions_per_working_hour": volumes.decisions / team.hours_per_day,
        "reviewers": team.reviewers,
        "hours_per_day": team.hours_per_day,
        "minutes_per_decision": team.minutes_per_decision,
        "utilisation": team_utilisation(workload, team),
        "mean_queue_wait_minutes": team_mean_wait_minutes(workload, team),
        "saturation_multiplier": team_saturation_multiplier(workload, team),
    }


def _first(multipliers: dict[str, float]) -> dict | None:
    if not multipliers:
        return None
    name = min(multipliers, key=multipliers.get)
    return {"name": name, "at_load_multiplier": multipliers[name]}


def _machines_needed(workload: Workload, tiers: sizing.TierSplit, load_multiplier: float) -> dict:
    """What the machines need (planned at their target utilisation) at `load_multiplier`, and whether
    it fits the cluster's limits: the other way to read "a team falls first"."""
    needs = sizing.resource_needs(workload, tiers, load_multiplier)
    return {
        "load_multiplier": load_multiplier,
        "retriever_replicas": sizing.replica_report(workload, tiers, load_multiplier)["total"],
        "needs": {name: {"need": need, "limit": limit, "fits": need <= limit} for name, (need, limit) in needs.items()},
    }


def people_report(workload: Workload) -> dict:
    """The plan's "People" section: per team its volumes, utilisation, wait and saturation multiplier;
    the machines' saturation multipliers beside them; and which falls behind first."""
    tiers = sizing.workload_tiers(workload)
    teams = {team.name: _team_report(workload, team) for team in workload.people.teams}
    machines = sizing.machine_saturation_report(workload, tiers)
    team_limits = {name: report["saturation_multiplier"] for name, report in teams.items()}
    machine_limits = {name: m["at_limits"] for name, m in machines.items() if m["kind"] == "machine"}
    everything = team_limits | {name: m["at_limits"] for name, m in machines.items()}
    first = _first(everything)
    if first is not None:
        first["kind"] = "team" if first["name"] in team_limits else machines[first["name"]]["kind"]
    first_team, first_machine = _first(team_limits), _first(machine_limits)
    return {
        "honeypot_rate": workload.people.honeypot_rate,
        "teams": teams,
        "machines": machines,
        "first_team": first_team,
        "first_machine": first_machine,
        "first_to_fall": first,
        "team_before_machines": bool(first_team and first_machine
                                     and first_team["at_load_multiplier"] < first_machine["at_load_multiplier"]),
        "machines_when_first_team_saturates": (
            _machines_needed(workload, tiers, first_team["at_load_multiplier"])
            if first_team and first_team["at_load_multiplier"] < sizing.MAX_LOAD_MULTIPLIER else None
        ),
    }
