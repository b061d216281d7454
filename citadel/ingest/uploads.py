"""Where admin uploads keep the raw files they ingest, and deleting them when a document is withdrawn.

    <home>/uploads/<tenant>/<job id>/<document id, made a safe file name><suffix>

One document per upload job. The raw file stays after ingestion (a dead letter is retried from it)
until its document is withdrawn (citadel/ingest/withdrawal.py).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from citadel.catalog.base import JobLog
from citadel.types import validate_tenant_id

UPLOADS_DIR = "uploads"


def safe_name(document_id: str) -> str:
    """A file name for an uploaded document: its id with anything but [A-Za-z0-9._-] replaced."""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in document_id)
    return cleaned.strip(".") or uuid.uuid4().hex


def tenant_uploads(home: Path, tenant_id: str) -> Path:
    return Path(home) / UPLOADS_DIR / validate_tenant_id(tenant_id)


def upload_path(home: Path, tenant_id: str, job_id: str, document_id: str, suffix: str) -> Path:
    return tenant_uploads(home, tenant_id) / job_id / f"{safe_name(document_id)}{suffix}"


def delete_uploads(home: Path, catalog: JobLog, tenant_id: str, document_id: str) -> int:
    """Delete the document's raw uploads (every version's); returns how many files went.

    Two ids can share a safe name ("a/b", "a_b"), so a file of that name is this document's unless
    its job's report names other documents only."""
    root = tenant_uploads(home, tenant_id)
    if not root.is_dir():
        return 0
    name, deleted = safe_name(document_id), 0
    for job_dir in (path for path in root.iterdir() if path.is_dir()):
        files = [path for path in job_dir.iterdir() if path.is_file() and path.stem == name]
        if files and _job_may_hold(catalog, job_dir.name, document_id):
            for path in files:
                path.unlink(missing_ok=True)
                deleted += 1
            _remove_if_empty(job_dir)
    return deleted


def _job_may_hold(catalog: JobLog, job_id: str, document_id: str) -> bool:
    job = catalog.get_job(job_id)
    documents = {f.get("document_id") for f in ((job or {}).get("report") or {}).get("files", [])}
    return not documents or document_id in documents


def _remove_if_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:  # not empty (another file of the job), or already gone
        pass
