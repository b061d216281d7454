"""`GET /v1/admin/faults`, `PUT` and `DELETE /v1/admin/faults/{stage}` (serving/services/drills.py)."""

from __future__ import annotations

from fastapi import APIRouter

from citadel.resilience.faults import FaultSpec
from serving.http.deps import Admin, Blocking, ServicesDep
from serving.http.protocol import ERRORS
from serving.http.routers.drills.protocol import FaultCleared, FaultList, FaultRequest

router = APIRouter(responses=ERRORS)


@router.get("/v1/admin/faults")
async def list_faults(admin: Admin, services: ServicesDep, run: Blocking) -> FaultList:
    return FaultList.model_validate(await run(services.drills.list_faults, admin))


@router.put("/v1/admin/faults/{stage}")
async def set_fault(stage: str, body: FaultRequest, admin: Admin, services: ServicesDep, run: Blocking) -> FaultSpec:
    """Add latency (fixed or a distribution), errors, a hang, or kill one replica of a stage."""
    result = await run(services.drills.set_fault, admin, {**body.model_dump(exclude_none=True), "stage": stage})
    return FaultSpec.model_validate(result)


@router.delete("/v1/admin/faults/{stage}")
async def clear_fault(stage: str, admin: Admin, services: ServicesDep, run: Blocking) -> FaultCleared:
    return FaultCleared.model_validate(await run(services.drills.clear_fault, admin, stage))
