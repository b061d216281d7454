"""`GET /v1/documents/{document}/versions/{version}/sections/{chunk_id}` (what a citation's URL opens)
and `GET /v1/policies/{policy_id}`, for a verified caller, after the live permission check: 404 for
what the caller may not read now, as for what does not exist.

Document and chunk ids may hold '/', percent-encoded in a citation's URL (citadel.types.section_url);
the server sees them decoded, so both are path parameters and the chunk id is checked against the
document and version it is named under (citadel/answer/sections.py)."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Path, Query

from citadel.catalog.policies import MAX_POLICY_ID_CHARS
from citadel.types import QUOTE_KEY_CHARS
from serving.http.deps import AsCaller, ServicesDep
from serving.http.protocol import ERRORS
from serving.http.routers.documents.protocol import PolicyBody, SectionBody

router = APIRouter(responses=ERRORS)

MAX_ID_CHARS = 512
MAX_VERSION = 2**31 - 1


@router.get("/v1/documents/{document_id:path}/versions/{version}/sections/{chunk_id:path}")
async def section(services: ServicesDep, work: AsCaller,
                  document_id: str = Path(..., min_length=1, max_length=MAX_ID_CHARS),
                  version: int = Path(..., ge=1, le=MAX_VERSION),
                  chunk_id: str = Path(..., min_length=1, max_length=MAX_ID_CHARS),
                  quote: Optional[str] = Query(None, min_length=QUOTE_KEY_CHARS, max_length=QUOTE_KEY_CHARS,
                                               pattern="^[0-9a-f]+$",
                                               description="The key of the sentence the answer quoted.")
                  ) -> SectionBody:
    """The cited section: heading path, page, text, the quoted sentence marked."""
    return SectionBody.model_validate(await work("documents", services.documents.section, document_id, version,
                                                 chunk_id, quote))


@router.get("/v1/policies/{policy_id}")
async def policy(services: ServicesDep, work: AsCaller,
                 policy_id: str = Path(..., min_length=1, max_length=MAX_POLICY_ID_CHARS)) -> PolicyBody:
    """The policy's current approved revision (the tenant's published document the catalog names with
    this policy id), if the caller may read it."""
    return PolicyBody.model_validate(await work("documents", services.documents.policy, policy_id))
