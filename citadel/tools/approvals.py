"""Durable approvals (DESIGN.md §10): a T2 tool call waits here for a person.

A run that needs an approval `request`s one and parks (its lease released, nothing held in memory);
a reviewer in the tool's approver group `decide`s it once (approve, with the proposed or edited
arguments, or reject); a timer `sweep`s: after `escalate_at` the lead group may decide too, after
`expire_at` the approval is EXPIRED, which counts as rejected. Silence never approves: nothing but
`decide` ever sets APPROVED, and `decide` refuses an approval whose `expire_at` has passed even before
a sweep has marked it. Every decision is a record: who, when, proposed and final arguments, comment.

The contract, which both backends keep and tests/conformance/test_approval_store.py checks:

- `request` is idempotent per (run_id, step_id): a resumed run asks again after a crash and gets the
  first approval back unchanged. An empty `approval_id` is replaced by a fresh uuid4 hex; an explicit
  id already used by another step is a Conflict. The store owns the lifecycle fields: whatever the
  caller passes, a new approval is stored PENDING, not escalated, undecided, `created_at` from the
  store's clock.
- `decide` moves PENDING to APPROVED or REJECTED exactly once, atomically across processes (the SQLite
  backend's conditional `UPDATE … WHERE status = 'pending'`): a second decision, or one on an expired
  approval, is Conflict (409); an unknown id is NotFound (404). An approval without `final_args`
  approves the proposed arguments; a rejection keeps what the reviewer sent (None by default).
- `sweep` first expires the pending approvals whose `expire_at` has passed, then escalates the still
  pending ones whose `escalate_at` has passed (with no lead group, escalation changes no decider and is
  still reported, as a reminder). Each approval is reported at most once as escalated and at most once
  as expired, across every process that sweeps. At most MAX_SWEEP of each per call; the rest follow
  on the next sweep.
- `list` is the tenant's approvals one of `groups` may decide (`Approval.deciders`: the approver
  group, and the lead group once escalated), oldest first, at most min(limit, MAX_LIST). Escalation is
  the stored flag: the lead group sees an approval from the sweep that escalates it.
- Arguments are JSON objects of at most MAX_ARGS_CHARS characters, stored as JSON by both backends (a
  tuple reads back as a list, in process too); reads return copies. Bad input is InvalidRequest (422)
  or InvalidTenant, never a driver error; SQLite failures are StateUnavailable.

Backends: `MemoryApprovalStore` (one process, tests) and `SQLiteApprovalStore`
(citadel/tools/approvals_sqlite.py, the file every process of the machine opens);
`make_approval_store` (citadel/tools/factory.py) chooses. Callers check who may see and decide
(tenant, `deciders()`); the store does not.
"""

from __future__ import annotations

import collections
import copy
import json
import math
import threading
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Callable, Protocol, runtime_checkable

from citadel.errors import Conflict, InvalidRequest, NotFound
from citadel.tools.spec import MAX_GROUP_CHARS
from citadel.types import validate_tenant_id


Clock = Callable[[], float]

# The file of the SQLite backend, under the home (computed here: config.py names no approvals path).
APPROVALS_FILE = "approvals.sqlite"
# The largest proposed or final arguments, as JSON characters (the policy engine's bound on a call).
MAX_ARGS_CHARS = 64_000
MAX_COMMENT_CHARS = 2_000
# Ids, step ids, tool names and user ids are short names, not text.
MAX_NAME_CHARS = 256
# The most approvals one `list` returns, and of each kind one `sweep` reports.
MAX_LIST = 1_000
MAX_SWEEP = 10_000


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"  # counts as rejected: silence never approves
    INFO_REQUESTED = "info_requested"  # a review task's third answer: the run ends asking for more


DECISIONS = frozenset({ApprovalStatus.APPROVED, ApprovalStatus.REJECTED, ApprovalStatus.INFO_REQUESTED})


class TaskKind(StrEnum):
    """What a person is asked: to approve a tool call (T2), or to review a failed check:
    the same lifecycle (pending, decided once, escalated, expired), the same store and timer."""
    APPROVAL = "approval"
    REVIEW = "review"


@dataclass(frozen=True)
class Approval:
    approval_id: str  # "" when requesting: the store assigns a uuid4 hex
    tenant_id: str
    run_id: str
    step_id: str
    tool: str
    requester: str  # the user the run acts for
    proposed_args: dict  # JSON-able
    approver_group: str
    lead_group: str | None = None
    escalate_at: float | None = None  # clock time; None: never escalates
    expire_at: float | None = None  # clock time; None: never expires (silence still never approves)
    status: ApprovalStatus = ApprovalStatus.PENDING
    escalated: bool = False  # once escalated, the lead group may decide too
    final_args: dict | None = None  # what was approved (proposed, or the reviewer's edit)
    decided_by: str | None = None  # None for an expiry
    decided_at: float | None = None  # clock time of the decision or the expiry
    comment: str = ""
    honeypot: bool = False  # a deliberately wrong request
    created_at: float = 0.0
    kind: TaskKind = TaskKind.APPROVAL
    reason: str | None = None  # a review task's failed check (citadel/reviews/tasks.py)
    # What the reviewer is shown beside the arguments: evidence lines with citations, a check's details.
    context: dict = field(default_factory=dict)

    def deciders(self) -> tuple[str, ...]:
        """The groups that may decide now: the approver group, plus the lead group once escalated."""
        if self.escalated and self.lead_group and self.lead_group != self.approver_group:
            return (self.approver_group, self.lead_group)
        return (self.approver_group,)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": str(self.status), "kind": str(self.kind)}


@runtime_checkable
class ApprovalStore(Protocol):
    def request(self, approval: Approval) -> Approval:
        """Store a new pending approval; idempotent on (run_id, step_id): a second request for the same
        step returns the stored one unchanged (a resumed run asks again after a crash)."""

    def get(self, approval_id: str) -> Approval | None: ...

    def for_step(self, run_id: str, step_id: str) -> Approval | None: ...

    def list(self, tenant_id: str, groups: Iterable[str], status: ApprovalStatus | None = ApprovalStatus.PENDING,
             limit: int = 100) -> list[Approval]:
        """The tenant's approvals that one of `groups` may decide (deciders()), oldest first, bounded;
        `status=None` lists every status."""

    def decide(self, approval_id: str, status: ApprovalStatus, decided_by: str, final_args: dict | None,
               comment: str = "") -> Approval:
        """PENDING → APPROVED/REJECTED, once: a second decision (or one on an expired approval) raises
        Conflict (409); an unknown id raises NotFound. Atomic across processes."""

    def sweep(self, now: float | None = None) -> tuple[list[Approval], list[Approval]]:
        """Expire the pending approvals whose expire_at has passed (EXPIRED: rejected) and escalate the
        pending ones whose escalate_at has passed. Returns (escalated now, expired now), each once."""

    def pending_counts(self) -> dict[tuple[str, str], int]:
        """How many approvals and review tasks of every tenant wait for a person, by (tool, kind): the
        approvals-pending metric, read at scrape time. One not yet swept past its expiry still counts."""

    def close(self) -> None:
        """Release the backend's connection (a no-op in process)."""


# ---------------------------------------------------------------------- checks both backends share
def _name(value: object, field: str, most: int = MAX_NAME_CHARS) -> str:
    if not isinstance(value, str) or not value or len(value) > most or not value.isprintable():
        raise InvalidRequest(f"{field} must be a non-empty printable string of at most {most} characters",
                             code="invalid_approval")
    return value


def _time(value: object, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidRequest(f"{field} must be a finite clock time or None", code="invalid_approval")
    return float(value)


def encode_args(value: object, field: str) -> str:
    """JSON text of arguments (a JSON object of at most MAX_ARGS_CHARS characters), or InvalidRequest."""
    if not isinstance(value, dict):
        raise InvalidRequest(f"{field} must be a JSON object", code="invalid_approval_args")
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        raise InvalidRequest(f"{field} must be JSON (no NaN, no other objects)", code="invalid_approval_args") from None
    if len(text) > MAX_ARGS_CHARS:
        raise InvalidRequest(f"{field} holds at most {MAX_ARGS_CHARS:,} characters of JSON",
                             code="invalid_approval_args")
    return text


def new_pending(approval: Approval, now: float) -> tuple[Approval, str]:
    """The approval as the store keeps it on request (checked; lifecycle fields the store's; an id
    assigned when empty) and its proposed arguments as JSON text."""
    validate_tenant_id(approval.tenant_id)
    approval_id = approval.approval_id or uuid.uuid4().hex
    _name(approval_id, "approval_id")
    for field in ("run_id", "step_id", "tool", "requester"):
        _name(getattr(approval, field), field)
    _name(approval.approver_group, "approver_group", MAX_GROUP_CHARS)
    if approval.lead_group is not None:
        _name(approval.lead_group, "lead_group", MAX_GROUP_CHARS)
    args_json = encode_args(approval.proposed_args, "proposed_args")
    context = json.loads(encode_args(approval.context, "context"))
    if approval.reason is not None:
        _name(approval.reason, "reason")
    stored = replace(approval, approval_id=approval_id, proposed_args=json.loads(args_json),
                     kind=TaskKind(approval.kind), context=context,
                     escalate_at=_time(approval.escalate_at, "escalate_at"),
                     expire_at=_time(approval.expire_at, "expire_at"), status=ApprovalStatus.PENDING,
                     escalated=False, final_args=None, decided_by=None, decided_at=None, comment="",
                     honeypot=bool(approval.honeypot), created_at=float(now))
    return stored, args_json


def checked_decision(status: object, decided_by: object, final_args: object,
                     comment: object) -> tuple[ApprovalStatus, str, str | None, str]:
    """A decision's (status, decided_by, final args as JSON or None, comment), or InvalidRequest."""
    try:
        decided = ApprovalStatus(status)
    except ValueError:
        decided = None
    if decided not in DECISIONS:
        raise InvalidRequest("a decision is 'approved', 'rejected' or 'info_requested'", code="invalid_decision")
    _name(decided_by, "decided_by")
    final_json = None if final_args is None else encode_args(final_args, "final_args")
    comment = "" if comment is None else comment
    if not isinstance(comment, str) or len(comment) > MAX_COMMENT_CHARS:
        raise InvalidRequest(f"a comment holds at most {MAX_COMMENT_CHARS:,} characters", code="invalid_decision")
    return decided, decided_by, final_json, comment


def refused_decision(approval: Approval) -> Conflict:
    """Why a decision is refused on an approval that is no longer pending or is past its expiry (a
    pending one past `expire_at` that no sweep has marked yet is expired all the same)."""
    if approval.status in (ApprovalStatus.PENDING, ApprovalStatus.EXPIRED):
        return Conflict(f"approval {approval.approval_id!r} has expired", code="approval_expired")
    return Conflict(f"approval {approval.approval_id!r} was already {approval.status}", code="approval_decided")


def list_limit(limit: int) -> int:
    return max(0, min(int(limit), MAX_LIST))


def group_set(groups: Iterable[str]) -> frozenset[str]:
    if isinstance(groups, str):  # one group passed bare would be read as its letters
        return frozenset({groups})
    return frozenset(g for g in groups if isinstance(g, str))


def _is_due(at: float | None, now: float) -> bool:
    return at is not None and at <= now


# ---------------------------------------------------------------------- in process
class MemoryApprovalStore:
    """Approvals of this process only (tests, a single-process deployment): one lock, the clock injected."""

    def __init__(self, clock: Clock):
        self._now = clock
        self._lock = threading.Lock()
        self._approvals: dict[str, Approval] = {}  # insertion order breaks created_at ties
        self._by_step: dict[tuple[str, str], str] = {}

    def request(self, approval: Approval) -> Approval:
        stored, _ = new_pending(approval, self._now())
        with self._lock:
            existing = self._by_step.get((stored.run_id, stored.step_id))
            if existing is not None:
                return _copy(self._approvals[existing])
            if stored.approval_id in self._approvals:
                raise Conflict(f"approval id {stored.approval_id!r} is taken by another step", code="approval_exists")
            self._approvals[stored.approval_id] = stored
            self._by_step[(stored.run_id, stored.step_id)] = stored.approval_id
            return _copy(stored)

    def get(self, approval_id: str) -> Approval | None:
        with self._lock:
            found = self._approvals.get(approval_id)
            return None if found is None else _copy(found)

    def for_step(self, run_id: str, step_id: str) -> Approval | None:
        with self._lock:
            approval_id = self._by_step.get((run_id, step_id))
            return None if approval_id is None else _copy(self._approvals[approval_id])

    def pending_counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            pending = [(a.tool, str(a.kind)) for a in self._approvals.values() if a.status is ApprovalStatus.PENDING]
        return dict(collections.Counter(pending))

    def list(self, tenant_id: str, groups: Iterable[str], status: ApprovalStatus | None = ApprovalStatus.PENDING,
             limit: int = 100) -> list[Approval]:
        wanted, count = group_set(groups), list_limit(limit)
        status = None if status is None else ApprovalStatus(status)
        with self._lock:
            found = [a for a in self._approvals.values()
                     if a.tenant_id == tenant_id and (status is None or a.status is status)
                     and wanted.intersection(a.deciders())]
            found.sort(key=lambda a: a.created_at)  # stable: insertion order within one time
            return [_copy(a) for a in found[:count]]

    def decide(self, approval_id: str, status: ApprovalStatus, decided_by: str, final_args: dict | None,
               comment: str = "") -> Approval:
        decided, decided_by, final_json, comment = checked_decision(status, decided_by, final_args, comment)
        with self._lock:
            approval = self._approvals.get(approval_id)
            if approval is None:
                raise NotFound(f"no approval {approval_id!r}")
            now = self._now()
            if approval.status is not ApprovalStatus.PENDING or _is_due(approval.expire_at, now):
                raise refused_decision(approval)
            if final_json is not None:
                final = json.loads(final_json)
            else:
                final = copy.deepcopy(approval.proposed_args) if decided is ApprovalStatus.APPROVED else None
            stored = replace(approval, status=decided, final_args=final, decided_by=decided_by, decided_at=now,
                             comment=comment)
            self._approvals[approval_id] = stored
            return _copy(stored)

    def sweep(self, now: float | None = None) -> tuple[list[Approval], list[Approval]]:
        with self._lock:
            at = self._now() if now is None else float(now)
            expired: list[Approval] = []
            for approval in self._due(lambda a: _is_due(a.expire_at, at), lambda a: a.expire_at):
                self._approvals[approval.approval_id] = replace(approval, status=ApprovalStatus.EXPIRED, decided_at=at)
                expired.append(self._approvals[approval.approval_id])
            escalated: list[Approval] = []
            due = self._due(lambda a: not a.escalated and _is_due(a.escalate_at, at), lambda a: a.escalate_at)
            for approval in due:
                self._approvals[approval.approval_id] = replace(approval, escalated=True)
                escalated.append(self._approvals[approval.approval_id])
            return [_copy(a) for a in escalated], [_copy(a) for a in expired]

    def _due(self, due: Callable[[Approval], bool], when: Callable[[Approval], float]) -> list[Approval]:
        pending = [a for a in self._approvals.values() if a.status is ApprovalStatus.PENDING and due(a)]
        return sorted(pending, key=when)[:MAX_SWEEP]

    def close(self) -> None:
        return None


def _copy(approval: Approval) -> Approval:
    """A copy whose argument dicts the caller may change without changing the store."""
    return replace(approval, proposed_args=copy.deepcopy(approval.proposed_args),
                   final_args=copy.deepcopy(approval.final_args), context=copy.deepcopy(approval.context))
