"""Building an ingest job (citadel.ingest.engine.TenantSources) from what an operator names: files and
directories for one tenant with its ACL spec, a manifest of document records for many tenants, or
the dead letters of earlier jobs. Every engine runs what these build, so they decide identically.

A manifest is Parquet or JSONL with `tenant_id`, `document_id`, `source` and optional `groups`,
`version`, `owner`, `status`, `effective_date` and `supersedes`; relative sources are resolved against
the manifest's folder. It is checked whole on read (a bad tenant id, date or repeated document fails
the manifest, not a worker half way through).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.json as pa_json
import pyarrow.parquet as pq

from citadel.catalog.base import JobLog
from citadel.errors import BadManifest, CitadelError
from citadel.ingest.engine import TenantSources, check_unique
from citadel.ingest.objects import ObjectStore
from citadel.ingest.sources import AclSpec, DocumentSource, SourceFile, TrustedFields, discover
from citadel.ingest.steps import replayed_fields
from citadel.ingest.uploads import StoredRawFile, stored_version
from citadel.types import validate_tenant_id

REQUIRED_COLUMNS = ("tenant_id", "document_id", "source")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")


@dataclass(frozen=True)
class DocumentRecord:
    """One manifest row, checked: who it belongs to, where it is, who may read it, which version."""

    tenant_id: str
    document_id: str
    source: str  # an absolute path (resolved against the manifest's folder)
    groups: tuple[str, ...] | None  # None: the row names no groups
    version: int | None  # None: the catalog numbers it
    fields: TrustedFields


def jobs_from_paths(tenant_id: str, paths: Sequence[Path], acl: AclSpec,
                    trust_front_matter: bool = False) -> list[TenantSources]:
    """Every ingestible file under `paths`, for one tenant; no job when there is none."""
    files = discover(paths, trust_front_matter=trust_front_matter)
    return [TenantSources(tenant_id, tuple(files), acl)] if files else []


def read_document_records(path: Path) -> list[DocumentRecord]:
    """The manifest's rows in order, each checked; raises BadManifest or DuplicateDocuments."""
    path = Path(path)
    table = pa_json.read_json(path) if path.suffix.lower() in JSONL_SUFFIXES else pq.read_table(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise BadManifest(f"{path}: manifest lacks column(s) {', '.join(missing)}")
    folder = path.resolve().parent
    records = [_record(path, folder, row) for row in table.to_pylist()]
    check_unique((r.tenant_id, r.document_id) for r in records)
    return records


def _record(path: Path, folder: Path, row: dict[str, Any]) -> DocumentRecord:
    source = Path(str(row["source"]))
    try:
        fields = TrustedFields.from_mapping(row)
    except CitadelError as error:
        raise BadManifest(f"{path}: document {row.get('document_id')!r}: {error}") from error
    return DocumentRecord(
        tenant_id=validate_tenant_id(str(row["tenant_id"])),  # a manifest's tenant names a directory
        document_id=str(row["document_id"]),
        source=str(source if source.is_absolute() else folder / source),
        groups=None if row.get("groups") is None else tuple(str(g) for g in row["groups"]),
        version=None if row.get("version") is None else int(row["version"]),
        fields=fields,
    )


def jobs_from_records(records: Sequence[DocumentRecord]) -> list[TenantSources]:
    """One TenantSources per tenant (sorted), rows in manifest order; a row's groups become an exact
    per-document entry of the tenant's ACL spec (a row without groups is readable by no group)."""
    by_tenant: dict[str, tuple[list[SourceFile], AclSpec, dict[str, int]]] = {}
    for record in records:
        files, acl, versions = by_tenant.setdefault(record.tenant_id, ([], AclSpec(), {}))
        files.append(SourceFile(Path(record.source), record.document_id, record.source, record.fields))
        if record.groups is not None:
            acl.documents[record.document_id] = record.groups
        if record.version is not None:
            versions[record.document_id] = record.version
    return [TenantSources(tenant_id, tuple(files), acl, versions)
            for tenant_id, (files, acl, versions) in sorted(by_tenant.items())]


def jobs_from_manifest(path: Path) -> list[TenantSources]:
    return jobs_from_records(read_document_records(path))


def jobs_from_dead_letters(catalog: JobLog, tenant_id: str | None,
                           objects: ObjectStore | None = None) -> tuple[list[TenantSources], list[int]]:
    """A replay of the dead letters not yet retried (one tenant's, or every tenant's) and the letter
    ids to mark once it ran. Each document is ingested as its job would have (its groups, trusted
    fields and front-matter trust) and as a replay (a scanned PDF's OCR gets the longer budget); a document
    that failed twice is replayed once, from its latest letter.

    A letter of an upload names its raw key (citadel.ingest.uploads): with `objects`, the replay reads
    that file from the store and requests the version the upload reserved, so its chunk ids, and the
    raw file `GET .../versions/{version}/raw` serves, are the upload's (a newer version published
    meanwhile makes it `stale_version`, never a step back)."""
    letters = catalog.dead_letters(tenant_id)
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for letter in letters:  # oldest first: a later letter of the same document replaces an earlier one
        key = (letter["tenant_id"], letter["meta"]["document_id"])
        latest.pop(key, None)
        latest[key] = letter
    by_tenant: dict[str, tuple[list[DocumentSource], AclSpec, dict[str, int]]] = {}
    for (tenant, document_id), letter in latest.items():
        files, acl, versions = by_tenant.setdefault(tenant, ([], AclSpec(), {}))
        source, version = _replayed_source(tenant, document_id, letter, objects)
        files.append(source)
        if version is not None:
            versions[document_id] = version
        acl.documents[document_id] = tuple(letter["meta"].get("groups", ()))
    jobs = [TenantSources(tenant, tuple(files), acl, versions)
            for tenant, (files, acl, versions) in sorted(by_tenant.items())]
    return jobs, [letter["id"] for letter in letters]


def _replayed_source(tenant_id: str, document_id: str, letter: dict[str, Any],
                     objects: ObjectStore | None) -> tuple[DocumentSource, int | None]:
    """The letter's document as a replay reads it: an upload's raw file from the store (with its
    reserved version), anything else from its path."""
    fields, trust_front_matter = replayed_fields(letter["meta"])
    version = stored_version(tenant_id, document_id, letter["source"])
    if version is not None and objects is not None:
        return StoredRawFile(objects, letter["source"], document_id, fields, trust_front_matter, replay=True), version
    return SourceFile(Path(letter["source"]), document_id, letter["source"], fields, trust_front_matter,
                      replay=True), None
