"""The approvals endpoint family (DESIGN.md §10, issue 16 item 4): the pending approvals a reviewer may
decide, and the decision.

A reviewer is a verified user like any other; they see and decide only their tenant's approvals whose
deciding groups (the tool's approver group, plus its lead group once escalated) they belong to — an
approval of another tenant is 404, one of their tenant they may not decide is 403. An approval or an
edit goes back through the policy engine (`check_edit`: schema, the approver's limit, not the
requester themselves); a second decision is 409. The decision is recorded with who, when, and the
proposed and final arguments, the run gets an event, and the run is restarted: the orchestrator calls
the tool with the final arguments (every check again, now) or records the rejection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from citadel.errors import CitadelError, Forbidden, InvalidRequest, NotFound
from citadel.state.runs import EventType, RunStatus, RunStore
from citadel.tools.approvals import Approval, ApprovalStatus, ApprovalStore
from citadel.tools.policy import Action, PolicyEngine, Reason
from serving.services.access import Caller

DECISIONS = {"approve": ApprovalStatus.APPROVED, "edit_and_approve": ApprovalStatus.APPROVED,
             "reject": ApprovalStatus.REJECTED}
MAX_COMMENT_CHARS = 2_000
STATUSES = {s.value: s for s in ApprovalStatus}


class ApprovalRefused(CitadelError):
    """The policy engine refused a reviewer's approval or edit; the code is its reason."""

    http_status = 403


class ApprovalsService:
    def __init__(self, approvals: ApprovalStore, runs: RunStore, policy: PolicyEngine | None,
                 restart: Callable[[str], object]):
        """`restart(run_id)`: start the decided run again on this process (the runs service's)."""
        self.approvals = approvals
        self.runs = runs
        self.policy = policy
        self._restart = restart

    def list(self, caller: Caller, status: str | None = "pending") -> dict:
        wanted = STATUSES.get(status) if status is not None else None
        if status is not None and wanted is None:
            raise InvalidRequest(f"status is one of {sorted(STATUSES)}")
        principal = caller.principal
        found = self.approvals.list(principal.tenant_id, principal.groups, wanted)
        return {"approvals": [public(a) for a in found]}

    def decide(self, caller: Caller, approval_id: str, decision: str, edits: Mapping[str, Any] | None,
               comment: str) -> dict:
        if decision not in DECISIONS:
            raise InvalidRequest(f"decision is one of {sorted(DECISIONS)}")
        if len(comment) > MAX_COMMENT_CHARS:
            raise InvalidRequest(f"a comment holds at most {MAX_COMMENT_CHARS:,} characters")
        approval = self._visible(caller, approval_id)
        reviewer = caller.principal
        if not set(reviewer.groups) & set(approval.deciders()):
            raise Forbidden(f"only {' or '.join(approval.deciders())} may decide this approval")
        final = None
        if decision != "reject":
            final = {**approval.proposed_args, **dict(edits or {})} if decision == "edit_and_approve" \
                else dict(approval.proposed_args)
            self._check(approval, final, reviewer)
        decided = self.approvals.decide(approval_id, DECISIONS[decision], reviewer.user_id, final, comment)
        self.runs.append(approval.run_id, EventType.PROGRESS, {
            "key": f"approval_decided:{approval_id}", "stage": "approval_decided", "approval_id": approval_id,
            "status": str(decided.status), "decided_by": decided.decided_by, "final_args": decided.final_args})
        self.runs.update(approval.run_id, status=RunStatus.QUEUED)
        self._restart(approval.run_id)
        return public(decided)

    def sweep(self) -> tuple[int, int]:
        """Escalate and expire what is due (a timer calls this): an escalation is an event on the run;
        an expiry counts as a rejection — the run gets the event and is restarted to record it and
        answer. Silence never approves."""
        escalated, expired = self.approvals.sweep()
        for approval in escalated:
            self.runs.append(approval.run_id, EventType.PROGRESS, {
                "key": f"approval_escalated:{approval.approval_id}", "stage": "approval_escalated",
                "approval_id": approval.approval_id, "deciders": list(approval.deciders())})
        for approval in expired:
            self.runs.append(approval.run_id, EventType.PROGRESS, {
                "key": f"approval_decided:{approval.approval_id}", "stage": "approval_decided",
                "approval_id": approval.approval_id, "status": str(approval.status), "decided_by": None,
                "final_args": None})
            self.runs.update(approval.run_id, status=RunStatus.QUEUED)
            self._restart(approval.run_id)
        return len(escalated), len(expired)

    def _check(self, approval: Approval, final: dict, reviewer) -> None:
        if self.policy is None:
            return
        verdict = self.policy.check_edit(approval.tool, approval.proposed_args, final, reviewer,
                                         requester_id=approval.requester)
        if verdict.action == Action.REFUSE:
            reason = verdict.reasons[0]
            if reason == Reason.INVALID_ARGS:
                raise InvalidRequest(verdict.detail or "the edited arguments are invalid")
            raise ApprovalRefused(verdict.detail or "the approval was refused", code=str(reason))

    def _visible(self, caller: Caller, approval_id: str) -> Approval:
        approval = self.approvals.get(approval_id)
        if approval is None or approval.tenant_id != caller.principal.tenant_id:
            raise NotFound(f"no approval {approval_id!r}")
        return approval


def public(approval: Approval) -> dict:
    return {"approval_id": approval.approval_id, "run_id": approval.run_id, "step_id": approval.step_id,
            "tool": approval.tool, "requester": approval.requester, "proposed_args": approval.proposed_args,
            "final_args": approval.final_args, "status": str(approval.status), "approver_group": approval.approver_group,
            "deciders": list(approval.deciders()), "escalated": approval.escalated, "expire_at": approval.expire_at,
            "decided_by": approval.decided_by, "decided_at": approval.decided_at, "comment": approval.comment,
            "created_at": approval.created_at}
