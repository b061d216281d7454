"""Where admin uploads keep the raw files they ingest: immutable keys in the object store
(citadel/ingest/objects.py), one per document version,

    raw/<tenant>/<document>/v<N>/<sha256 of the bytes><suffix>

The version is the catalog's (reserved when the upload is queued, citadel/ingest/runner.py), so
`GET /v1/documents/{document}/versions/{version}/raw` finds the file a citation's version came
from (`open_raw`, after the live permission check). A key is never overwritten; a withdrawal deletes
every version's raw file (and any upload of the older layout, below).

The older layout, `<home>/uploads/<tenant>/<job id>/<document id, made a safe file name><suffix>`,
is migrated on the job runner's start (`migrate_legacy_uploads`): a file whose job published a
version moves under that version's key; one whose job published nothing stays where it is until its
document is withdrawn (`delete_legacy_uploads`).

An upload's raw key is also the source its engines record (and a dead letter names): both engines
read it back from the store (`StoredRawFile`, `stored_source`), so `citadel ingest
--retry-dead-letters` replays a failed upload from its raw file, as the version the upload reserved.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from citadel.catalog.base import JobLog, PermissionSource
from citadel.errors import NotFound
from citadel.ingest.objects import ObjectStore
from citadel.ingest.sources import TrustedFields
from citadel.parsing import OcrSettings, parse_bytes
from citadel.types import ParsedDocument, Principal, content_hash, validate_tenant_id

RAW_PREFIX = "raw"
UPLOADS_DIR = "uploads"  # the older layout's folder under the home
SHA256_HEX_CHARS = 64
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class RawFile:
    key: str
    suffix: str
    content: bytes


def document_segment(document_id: str) -> str:
    """A document id as one key segment, distinct for distinct ids ('a/b' and 'a_b' stay apart)."""
    segment = quote(document_id, safe="._:-")
    return segment.replace(".", "%2E") if set(segment) <= {"."} else segment


def document_prefix(tenant_id: str, document_id: str) -> str:
    return f"{RAW_PREFIX}/{validate_tenant_id(tenant_id)}/{document_segment(document_id)}/"


def version_prefix(tenant_id: str, document_id: str, version: int) -> str:
    return f"{document_prefix(tenant_id, document_id)}v{int(version)}/"


def raw_key(tenant_id: str, document_id: str, version: int, content: bytes, suffix: str) -> str:
    return f"{version_prefix(tenant_id, document_id, version)}{hashlib.sha256(content).hexdigest()}{suffix}"


def store_raw(store: ObjectStore, tenant_id: str, document_id: str, version: int, content: bytes,
              suffix: str) -> str:
    """Keep the bytes under their version's key (a no-op if they are there); returns the key."""
    key = raw_key(tenant_id, document_id, version, content, suffix)
    store.put_if_absent(key, content)
    return key


def read_raw(store: ObjectStore, tenant_id: str, document_id: str, version: int) -> RawFile:
    """The raw file of one document version; NotFound when none was kept (a document ingested from
    a directory or a manifest, or one withdrawn)."""
    keys = store.list_prefix(version_prefix(tenant_id, document_id, version))
    if not keys:
        raise NotFound(f"no raw file of document {document_id!r} version {version}")
    key = keys[0]  # one file per version: its bytes decided the version
    name = key.rsplit("/", 1)[1]
    suffix = name[name.index("."):] if "." in name else ""
    return RawFile(key, suffix, store.get(key))


def stored_version(tenant_id: str, document_id: str, source: str) -> int | None:
    """The version whose raw key `source` is, when it is one of this tenant's and document's
    (`raw/<tenant>/<document>/v<N>/<64 hex><suffix>`, whole); None for anything else, such as a path
    of a file ingested from disk. The tenant and document must match, so a source can only ever name
    its own document's raw file."""
    parts = source.split("/")
    if len(parts) != 5 or parts[:3] != [RAW_PREFIX, tenant_id, document_segment(document_id)]:
        return None
    version, name = parts[3], parts[4]
    digest = name.split(".", 1)[0]
    if not (version[:1] == "v" and version[1:].isdigit() and int(version[1:]) > 0):
        return None
    if len(digest) != SHA256_HEX_CHARS or not set(digest) <= _HEX:
        return None
    return int(version[1:])


@dataclass(frozen=True)
class StoredRawFile:
    """An upload's raw file as a document source (citadel.ingest.sources.DocumentSource), read from
    the object store by its key, which is also its source: what a runner ingests, and what a dead
    letter's replay reads back. The bytes were bounded when stored; `load` checks them again."""

    store: ObjectStore
    key: str
    document_id: str
    fields: TrustedFields = TrustedFields()
    trust_front_matter: bool = False
    replay: bool = False

    @property
    def source(self) -> str:
        return self.key

    def load(self, max_bytes: int, ocr: OcrSettings | None = None) -> tuple[ParsedDocument, str]:
        """(parsed document, hash of the raw bytes), as SourceFile.load gives for a file."""
        data = self.store.get(self.key)
        return parse_bytes(data, self.key, max_bytes=max_bytes, ocr=ocr), content_hash(data)


def open_raw(permissions: PermissionSource, store: ObjectStore, principal: Principal, document_id: str,
             version: int) -> RawFile:
    """The raw file of a document version the principal may read now, after the live check retrieval
    makes (published, the current version, shared with one of the principal's groups, of the
    principal's own tenant); NotFound otherwise, the same as for a version without a raw file, so
    what exists cannot be probed."""
    readable = permissions.readable_documents(principal).get(document_id)
    if readable is None or readable.version != version:
        raise NotFound(f"no raw file of document {document_id!r} version {version} that you may read")
    return read_raw(store, principal.tenant_id, document_id, version)


def delete_raw(store: ObjectStore, tenant_id: str, document_id: str) -> int:
    """Delete every version's raw file of the document; returns how many went."""
    return sum(store.delete(key) for key in store.list_prefix(document_prefix(tenant_id, document_id)))


# ------------------------------------------------------------------ the older layout
def safe_name(document_id: str) -> str:
    """The older layout's file name for a document: its id with anything but [A-Za-z0-9._-] replaced."""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in document_id)
    return cleaned.strip(".") or uuid.uuid4().hex


def tenant_uploads(home: Path, tenant_id: str) -> Path:
    return Path(home) / UPLOADS_DIR / validate_tenant_id(tenant_id)


def delete_legacy_uploads(home: Path, catalog: JobLog, tenant_id: str, document_id: str) -> int:
    """Delete the document's uploads of the older layout (every version's); returns how many went.

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


def migrate_legacy_uploads(home: Path, catalog: JobLog, store: ObjectStore) -> int:
    """Move each older-layout upload whose job published a version under that version's raw key;
    returns how many moved. Idempotent (a put of the same bytes is a no-op), so a crash half way
    is finished by the next run."""
    root = Path(home) / UPLOADS_DIR
    if not root.is_dir():
        return 0
    moved = 0
    for path in sorted(root.glob("*/*/*")):
        tenant_id, job_id = path.parent.parent.name, path.parent.name
        published = _published_by(catalog, job_id, path.stem)
        if not path.is_file() or published is None:
            continue
        document_id, version = published
        store_raw(store, tenant_id, document_id, version, path.read_bytes(), path.suffix)
        path.unlink()
        _remove_if_empty(path.parent)
        moved += 1
    return moved


def _published_by(catalog: JobLog, job_id: str, stem: str) -> tuple[str, int] | None:
    """(document id, version) the job published from the file named `stem`, if it published one."""
    job = catalog.get_job(job_id)
    for outcome in ((job or {}).get("report") or {}).get("files", []):
        if outcome.get("status") == "published" and safe_name(str(outcome.get("document_id"))) == stem:
            return str(outcome["document_id"]), int(outcome["version"])
    return None


def _job_may_hold(catalog: JobLog, job_id: str, document_id: str) -> bool:
    job = catalog.get_job(job_id)
    documents = {f.get("document_id") for f in ((job or {}).get("report") or {}).get("files", [])}
    return not documents or document_id in documents


def _remove_if_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:  # not empty (another file of the job), or already gone
        pass
