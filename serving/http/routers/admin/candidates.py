"""Candidate test items (serving/services/candidates.py): a tenant's admin lists the queue and
promotes an item into the labeled sets with a label, or dismisses it."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Query
from fastapi import Path as FastApiPath

from serving.http.deps import Admin, Blocking, ServicesDep
from serving.http.protocol import ERRORS
from serving.http.routers.admin.protocol import MAX_ROW_ID, Candidate, CandidateLabel, CandidatePage

router = APIRouter(responses=ERRORS)


@router.get("/v1/admin/candidates")
async def list_candidates(admin: Admin, services: ServicesDep, run: Blocking,
                          tenant: str = Query(..., max_length=64),
                          source: Optional[str] = Query(None, max_length=80),
                          status: Optional[str] = Query("pending", max_length=16),
                          limit: int = Query(100, ge=1, le=500),
                          after_id: int = Query(0, ge=0, le=MAX_ROW_ID)) -> CandidatePage:
    """The tenant's candidates, oldest first: `source` answer_feedback or tool:<name>; `status`
    pending (default), promoted or dismissed; `limit` per page, the next page `after_id` the last id."""
    result = await run(services.candidates.list, admin, tenant, source, status, limit, after_id)
    return CandidatePage.model_validate(result)


@router.post("/v1/admin/candidates/{candidate_id}/promote")
async def promote_candidate(body: CandidateLabel, admin: Admin, services: ServicesDep, run: Blocking,
                            candidate_id: int = FastApiPath(..., ge=1, le=MAX_ROW_ID)) -> Candidate:
    """Promote a pending candidate into the labeled sets with the owner's label (once: 409 after)."""
    result = await run(services.candidates.promote, admin, candidate_id, body.model_dump(exclude_none=True))
    return Candidate.model_validate(result)


@router.post("/v1/admin/candidates/{candidate_id}/dismiss")
async def dismiss_candidate(admin: Admin, services: ServicesDep, run: Blocking,
                            candidate_id: int = FastApiPath(..., ge=1, le=MAX_ROW_ID)) -> Candidate:
    return Candidate.model_validate(await run(services.candidates.dismiss, admin, candidate_id))
