"""A document version's raw file, for a verified caller (`GET /v1/documents/{document}/versions/{version}/raw`):
the live permission check retrieval makes, then the bytes from the object store (citadel/ingest/uploads.py
`open_raw`). What the caller may not read now, a withdrawn document, a superseded version and a version
without a raw file are all the same 404; where the file is stored never leaves the server.
"""

from __future__ import annotations

from citadel.catalog.base import PermissionSource
from citadel.ingest.objects import ObjectStore
from citadel.ingest.uploads import RawFile, open_raw
from serving.services.access import Caller


class RawFilesService:
    def __init__(self, catalog: PermissionSource, objects: ObjectStore):
        self.catalog = catalog
        self.objects = objects

    def open(self, caller: Caller, document_id: str, version: int) -> RawFile:
        return open_raw(self.catalog, self.objects, caller.principal, document_id, version)
