"""`GET /v1/approvals` and `POST /v1/approvals/{approval_id}:decide` for a verified caller."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Query

from serving.http.deps import AsCaller, ServicesDep
from serving.http.protocol import ERRORS
from serving.http.routers.approvals.protocol import ApprovalList, DecidedApproval, DecisionRequest

router = APIRouter(responses=ERRORS)


@router.get("/v1/approvals")
async def list_approvals(services: ServicesDep, work: AsCaller,
                         status: Optional[str] = Query("pending", max_length=16)) -> ApprovalList:
    """The caller's tenant's approvals that one of the caller's groups may decide."""
    return ApprovalList.model_validate(await work("approvals", services.approvals.list, status))


@router.post("/v1/approvals/{approval_id}:decide", response_model_exclude_unset=True)
async def decide_approval(approval_id: str, body: DecisionRequest, services: ServicesDep,
                          work: AsCaller) -> DecidedApproval:
    """approve | edit_and_approve (edits checked by the policy engine) | reject; once (409 after)."""
    result = await work("approvals", services.approvals.decide, approval_id, body.decision, body.edits, body.comment)
    return DecidedApproval.model_validate(result)
