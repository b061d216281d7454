"""The approvals family's request and response bodies."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from serving.http.protocol import RequestBody, ResponseBody


class DecisionRequest(RequestBody):
    decision: Literal["approve", "edit_and_approve", "reject", "correct", "request_info"] = Field(
        description="An approval: approve | edit_and_approve | reject. A review task for a failed check: "
                    "correct (the source was fixed, or the action's arguments are edited; every check runs "
                    "again) | request_info | reject.")
    edits: Optional[dict[str, Any]] = Field(None, description="edit_and_approve, or correct on an action out of "
                                            "scope: the arguments changed (checked again by the policy engine: "
                                            "schema and the approver's limit).")
    comment: str = Field("", description="Why (at most 2,000 characters); kept with the decision.")


class ApprovalBody(ResponseBody):
    """An approval (of a tool call) or a review task (a failed check), as its reviewers see it."""

    approval_id: str
    run_id: str
    step_id: str
    tool: str
    requester: str
    proposed_args: dict[str, Any]
    final_args: Optional[dict[str, Any]] = Field(..., description="What was approved; null until approved.")
    status: str = Field(..., description="pending | approved | rejected | expired | info_requested.")
    approver_group: str
    deciders: list[str] = Field(..., description="The groups (or the owner) that may decide it now.")
    escalated: bool
    expire_at: Optional[float]
    decided_by: Optional[str]
    decided_at: Optional[float]
    comment: str
    created_at: float
    kind: str = Field(..., description="approval (a tool call) | review (a failed check).")
    reason: Optional[str] = Field(..., description="A review task's failed check.")
    decisions: list[str] = Field(..., description="The decisions it takes.")


class ApprovalList(ResponseBody):
    approvals: list[ApprovalBody]


class DecidedApproval(ApprovalBody):
    """The decided approval; a planted test request (a honeypot) also says so, and whether the
    reviewer caught it (these three keys appear only then)."""

    honeypot: Optional[bool] = None
    caught: Optional[bool] = None
    message: Optional[str] = Field(None, description="What the reviewer is told at once about a honeypot.")
