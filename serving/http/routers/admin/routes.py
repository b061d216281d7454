"""Admin routes over documents, jobs, kept prompts and the pause switch (serving/services/admin.py,
serving/services/prompts.py). Writes run once per `Idempotency-Key`: a replay answers with the first
response and its status."""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from fastapi import APIRouter, Header, Response
from pydantic import BaseModel

from citadel.errors import InvalidRequest
from citadel.types import validate_tenant_id
from serving.http.deps import Admin, Blocking, BlockingRunner, ServicesDep
from serving.http.protocol import ERRORS
from serving.http.routers.admin.protocol import (AclRequest, AclSet, Job, JobStarted, KeptPromptBody, PauseRequest,
                                                 PauseState, ToolPauses, UploadRequest, Withdrawn)
from serving.services.compose import Services
from serving.services.prompts import prompt_reads

router = APIRouter(responses=ERRORS)


@router.post("/v1/admin/tenants/{tenant_id}/documents", status_code=202)
async def upload(tenant_id: str, body: UploadRequest, admin: Admin, services: ServicesDep, run: Blocking,
                 response: Response, idempotency_key: Optional[str] = Header(None)) -> JobStarted:
    """Upload a document; starts an ingestion job and returns its id (poll /v1/admin/jobs/{id})."""
    validate_tenant_id(tenant_id)  # 400 `invalid_tenant` before the catalog or a directory sees it
    payload = {"tenant": tenant_id, **body.model_dump()}
    action = functools.partial(services.admin.upload, admin, tenant_id, body.document_id, body.filename,
                               body.content(), body.groups, fields=body.trusted_fields())
    write = IdempotentWrite(services, run, response, f"upload:{admin.id}", idempotency_key)
    return await write(JobStarted, payload, action, 202)


@router.get("/v1/admin/jobs/{job_id}")
async def job(job_id: str, admin: Admin, services: ServicesDep, run: Blocking) -> Job:
    return Job.model_validate(await run(services.admin.job, admin, job_id))


@router.post("/v1/admin/tenants/{tenant_id}/documents/{document_id}/withdraw")
async def withdraw(tenant_id: str, document_id: str, admin: Admin, services: ServicesDep, run: Blocking,
                   response: Response, idempotency_key: Optional[str] = Header(None)) -> Withdrawn:
    validate_tenant_id(tenant_id)
    payload = {"tenant": tenant_id, "document": document_id}
    action = functools.partial(services.admin.withdraw, admin, tenant_id, document_id)
    write = IdempotentWrite(services, run, response, f"withdraw:{admin.id}", idempotency_key)
    return await write(Withdrawn, payload, action)


@router.put("/v1/admin/tenants/{tenant_id}/documents/{document_id}/acl")
async def set_acl(tenant_id: str, document_id: str, body: AclRequest, admin: Admin, services: ServicesDep,
                  run: Blocking, response: Response, idempotency_key: Optional[str] = Header(None)) -> AclSet:
    validate_tenant_id(tenant_id)
    payload = {"tenant": tenant_id, "document": document_id, "groups": sorted(body.groups)}
    action = functools.partial(services.admin.set_acl, admin, tenant_id, document_id, list(body.groups))
    write = IdempotentWrite(services, run, response, f"acl:{admin.id}", idempotency_key)
    return await write(AclSet, payload, action)


@router.get("/v1/admin/prompts/{request_id}")
async def kept_prompt(request_id: str, admin: Admin, services: ServicesDep, run: Blocking) -> KeptPromptBody:
    """What the generator was sent and returned for a request (kept encrypted for
    `answer.prompt_retention_days`): platform admins only, and every read is audited."""
    return KeptPromptBody.model_validate(await run(prompt_reads(services.wiring).read, admin, request_id))


@router.get("/v1/admin/tools")
async def list_tools(admin: Admin, services: ServicesDep, run: Blocking) -> ToolPauses:
    """What an admin may pause (the registry's tools and `model`) and the pauses in force."""
    return ToolPauses.model_validate(await run(services.admin.tools, admin))


@router.post("/v1/admin/tools/{target}:pause")
async def pause_tool(target: str, body: PauseRequest, admin: Admin, services: ServicesDep,
                     run: Blocking) -> PauseState:
    """Pause a tool or the model for a tenant or everywhere, without a restart: a paused tool
    refuses with `tool_paused`; a paused model answers with quotes (`model_paused`)."""
    result = await run(services.admin.pause, admin, target, tenant_or_everywhere(body.tenant_id))
    return PauseState.model_validate(result)


@router.post("/v1/admin/tools/{target}:resume")
async def resume_tool(target: str, body: PauseRequest, admin: Admin, services: ServicesDep,
                      run: Blocking) -> PauseState:
    result = await run(services.admin.resume, admin, target, tenant_or_everywhere(body.tenant_id))
    return PauseState.model_validate(result)


class IdempotentWrite:
    """An admin write run once per idempotency key (serving/services/admin.py `idempotent`): the
    groups it names are checked first, and a replay answers with the first response's status."""

    def __init__(self, services: Services, run: BlockingRunner, response: Response, scope: str,
                 key: Optional[str]):
        self.services, self.run, self.response = services, run, response
        self.scope, self.key = scope, key

    async def __call__(self, model: type[BaseModel], payload: dict, action: Callable[[], dict],
                       status_code: int = 200) -> Any:
        check_groups(payload.get("groups", ()), self.services.config.serving)
        body, status = await self.run(self.services.admin.idempotent, self.scope, self.key, payload, action,
                                      status_code)
        self.response.status_code = status
        return model.model_validate(body)


def tenant_or_everywhere(tenant_id: Optional[str]) -> Optional[str]:
    if tenant_id is not None:
        validate_tenant_id(tenant_id)
    return tenant_id


def check_groups(groups, serving) -> None:
    """An admin write names at most `serving.max_groups` groups of 1 to `serving.max_name_chars`
    printable characters each (422), checked before anything is stored."""
    if len(groups) > serving.max_groups:
        raise InvalidRequest(f"{len(groups):,} groups; at most {serving.max_groups:,} may be named")
    for group in groups:
        if not 0 < len(group) <= serving.max_name_chars or not group.isprintable():
            raise InvalidRequest(f"group names are 1 to {serving.max_name_chars} printable characters")
