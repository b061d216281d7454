"""`GET /v1/documents/{document}/versions/{version}/raw`: the file a document version was ingested from,
for a verified caller who may read that version now (serving/services/raw_files.py); 404 otherwise. The
bytes come through the gateway, never as a bucket URL; the reply is not cached by anyone on the way
(what a caller may read changes with the ACL)."""

from __future__ import annotations

from fastapi import APIRouter, Path
from fastapi.responses import Response

from serving.http.deps import AsCaller, ServicesDep
from serving.http.protocol import ERRORS
from serving.http.routers.documents.routes import MAX_ID_CHARS, MAX_VERSION

router = APIRouter(responses=ERRORS)

MEDIA_TYPES = {".pdf": "application/pdf", ".md": "text/markdown; charset=utf-8",
               ".markdown": "text/markdown; charset=utf-8", ".txt": "text/plain; charset=utf-8"}
DOWNLOAD_TYPE = "application/octet-stream"


@router.get("/v1/documents/{document_id:path}/versions/{version}/raw", response_class=Response,
            responses={200: {"description": "The raw file.",
                             "content": {media: {} for media in sorted(set(MEDIA_TYPES.values()))}}})
async def raw_file(services: ServicesDep, work: AsCaller,
                   document_id: str = Path(..., min_length=1, max_length=MAX_ID_CHARS),
                   version: int = Path(..., ge=1, le=MAX_VERSION)) -> Response:
    """The document version's raw file, as uploaded."""
    raw = await work("documents", services.raw_files.open, document_id, version)
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in document_id)[:100] or "document"
    return Response(raw.content, media_type=MEDIA_TYPES.get(raw.suffix, DOWNLOAD_TYPE),
                    headers={"content-disposition": f'attachment; filename="{name}-v{version}{raw.suffix}"',
                             "cache-control": "private, no-store", "x-content-type-options": "nosniff"})
