"""A run's records and outcomes, typed (DESIGN.md §10).

The loop passes enums and dataclasses, never status strings or sentinel returns: a step ends in a
`StepOutcome`, a round or a reflection in a `LoopSignal`, a stopping rule names a `StopReason`. What a
run store keeps is unchanged: each record converts to its JSON form at the journal's edge
(`to_record`, citadel/agent/journal.py), so runs already stored, their replays, `citadel runs show`
and the runs API read them as before. Record keys are built here only (`RecordKey`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any

from citadel.agent.budget import COST_BUDGET, TOKEN_BUDGET, USER_BUDGET
from citadel.answer.service import outcome_of


class StepOutcome(StrEnum):
    """How one step ended: its result recorded (ok, failed), or waiting for a person (not recorded)."""

    OK = "ok"
    FAILED = "failed"
    NEEDS_APPROVAL = "needs_approval"  # a T2 call waits for its approver group
    NEEDS_REVIEW = "needs_review"  # a failed check waits for a person (citadel/reviews/tasks.py)

    @property
    def parks(self) -> bool:
        return self in (StepOutcome.NEEDS_APPROVAL, StepOutcome.NEEDS_REVIEW)


class StopReason(StrEnum):
    """Why a run stopped before its checklist was met: the five rules, the budgets, cancellation, and
    a re-plan that could not be made."""

    STEP_CAP = "step_cap"
    DEADLINE = "deadline"
    NO_NEW_EVIDENCE = "no_new_evidence"
    REPEATED_CALL = "repeated_call"
    CANCELLED = "cancelled"
    REPLAN_FAILED = "replan_failed"
    TOKEN_BUDGET = TOKEN_BUDGET
    COST_BUDGET = COST_BUDGET
    USER_BUDGET = USER_BUDGET


class LoopSignal(Enum):
    """What the loop does next."""

    GO_ON = "go_on"  # nothing decided yet: another round
    FINISH = "finish"  # the checklist is met, or nothing more can be done: synthesis
    PARKED = "parked"  # a person decides first: the run waits (status WAITING), holding nothing
    STOPPED = "stopped"  # a stopping rule fired: its reason is the run's "stop" record


class RecordKey:
    """The keys a run's records are stored under (`RunStore.record_step`)."""

    ROUTE = "route"
    STOP = "stop"
    ANSWER = "answer"
    STEP_PREFIX = "step:"

    @staticmethod
    def plan(index: int) -> str:
        return f"plan:{index}"

    @staticmethod
    def step(step_id: str) -> str:
        return f"{RecordKey.STEP_PREFIX}{step_id}"

    @staticmethod
    def reflect(number: int) -> str:
        return f"reflect:{number}"

    @staticmethod
    def approval(step_id: str) -> str:
        return f"approval:{step_id}"

    @staticmethod
    def refresh(round_: int) -> str:
        return f"refresh:{round_}"


class _Unset:
    """A field the record leaves out (unlike None, which it keeps as null)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


class Record:
    """A dataclass a run store keeps: its JSON form has its fields in order, less those UNSET, enums
    as their values."""

    def to_record(self) -> dict[str, Any]:
        record = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is not UNSET:
                record[f.name] = value.value if isinstance(value, Enum) else value
        return record


@dataclass
class RouteRecord(Record):
    path: str


@dataclass
class StopRecord(Record):
    reason: str


@dataclass
class ApprovalRecord(Record):
    approval_id: str


@dataclass
class PlanRecord(Record):
    """A plan as made (`plan`), or why none could be (`invalid`, `code`)."""

    plan: Any = UNSET
    invalid: Any = UNSET
    code: Any = UNSET
    tokens: int = 0


@dataclass
class ReflectionRecord(Record):
    reflection: dict[str, Any]
    skipped: bool
    fallback: str | None
    evidence: int
    tokens: int
    action: str = ""


@dataclass
class RefreshRecord(Record):
    """The run's searches made again after a reviewer corrected the sources: passages by step id."""

    passages: dict[str, list[dict[str, Any]]]


@dataclass
class StepResult(Record):
    """One step's result. OK and FAILED are recorded (with the step's id, tool, ask, call and
    tokens); NEEDS_APPROVAL and NEEDS_REVIEW carry what the request or the review task needs."""

    status: StepOutcome
    error: Any = UNSET
    passages: list[dict[str, Any]] = field(default_factory=list)
    degraded: Any = UNSET
    screened: Any = UNSET  # what the screen dropped from the sources
    screened_response: Any = UNSET  # ... and from a tool's response
    result: Any = UNSET  # a tool that acts: what its system answered
    audit: Any = UNSET
    repeated: Any = UNSET
    review_id: Any = UNSET
    comment: Any = UNSET
    approval_id: Any = UNSET
    reason: Any = UNSET  # a review's reason (ReviewReason's value)
    tool: Any = UNSET
    arguments: Any = UNSET
    detail: Any = UNSET
    round: Any = UNSET

    @classmethod
    def failed(cls, error: str, **extra: Any) -> StepResult:
        return cls(StepOutcome.FAILED, error=error, **extra)


@dataclass
class AnswerRecord(Record):
    """What a run keeps of its answer, for its final event (`outcome` follows from refused and reason)."""

    answer: str
    refused: bool
    reason: str | None
    citations: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    tokens: int = 0
    prompt: Any = UNSET  # what the synthesis prompt held (a synthesised answer only)

    def to_record(self) -> dict[str, Any]:
        record = super().to_record()
        return {"answer": record.pop("answer"), "outcome": outcome_of(self.refused, self.reason), **record}

    @classmethod
    def of(cls, response, missing: list[str], tokens: int) -> AnswerRecord:
        """What the run keeps of the answer service's response."""
        return cls(response.answer, response.refused, response.reason, [dict(c) for c in response.citations],
                   [dict(c) for c in response.conflicts], [str(d) for d in response.degraded], list(missing), tokens)

    @classmethod
    def cancelled(cls, missing: list[str]) -> AnswerRecord:
        return cls("", True, str(StopReason.CANCELLED), missing=missing)


def succeeded(step_record: Mapping[str, Any]) -> bool:
    """Whether a stored step record is a step that ran and succeeded."""
    return step_record.get("status") == StepOutcome.OK


def record_outcome(record: dict[str, Any]) -> str:
    """The outcome of an answer record or a final event's data, derived from `refused` and `reason`
    (one kept before answers carried their outcome has none)."""
    return outcome_of(record["refused"], record["reason"])


def run_outcome(steps: dict[str, dict[str, Any]]) -> str | None:
    """A run's outcome from its recorded steps (`RunStore.steps`): its answer's; None before it answers."""
    record = steps.get(RecordKey.ANSWER)
    return record_outcome(record) if record is not None else None
