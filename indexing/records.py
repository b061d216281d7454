"""The pipeline's input: one record per document (tenant, doc id, source, ACL groups, version, the
trusted fields of citadel.sources.TrustedFields).

From a directory tree (the tenant and ACL spec given by the caller, front matter trusted only when the
operator says so), from a manifest (Parquet or JSONL with `tenant_id`, `document_id`, `source`,
optional `groups`, `version`, `owner`, `status`, `effective_date` and `supersedes`; relative sources
are resolved against the manifest's folder), or from a tenant's dead letters for a replay.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from citadel.catalog.base import Catalog
from citadel.errors import CitadelError
from citadel.sources import TrustedFields, discover
from citadel.stages import replayed_fields
from citadel.types import validate_tenant_id
from indexing.stages import RECORD_SCHEMA

REQUIRED_COLUMNS = ("tenant_id", "document_id", "source")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")


class BadManifest(CitadelError):
    code = "bad_manifest"


class DuplicateDocuments(CitadelError):
    """Two records would publish the same (tenant, document id): the same version twice."""

    code = "duplicate_document"


def _records(rows: list[dict[str, Any]]) -> pa.Table:
    seen: set[tuple[str, str]] = set()
    duplicates = []
    for order, row in enumerate(rows):
        validate_tenant_id(row["tenant_id"])  # a manifest's tenant names a directory: checked on read
        row["doc_order"] = order
        key = (row["tenant_id"], row["document_id"])
        if key in seen:
            duplicates.append(f"{key[0]}:{key[1]}")
        seen.add(key)
    if duplicates:
        raise DuplicateDocuments(f"documents named more than once: {', '.join(duplicates[:5])}"
                                 + (f" and {len(duplicates) - 5} more" if len(duplicates) > 5 else ""))
    return pa.Table.from_pylist(rows, schema=RECORD_SCHEMA)


def records_from_paths(tenant_id: str, paths: Sequence[Path], trust_front_matter: bool = False) -> pa.Table:
    """Every ingestible file under `paths`, in the order `discover` gives (the in-process order).
    Groups stay null: the job's ACL spec decides them, as in the in-process path."""
    return _records([{"tenant_id": tenant_id, "document_id": f.document_id, "source": f.source,
                      "groups": None, "version": None, "trust_front_matter": f.trust_front_matter}
                     for f in discover(paths, trust_front_matter=trust_front_matter)])


def records_from_manifest(path: Path) -> pa.Table:
    path = Path(path)
    table = pa_json.read_json(path) if path.suffix.lower() in JSONL_SUFFIXES else pq.read_table(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise BadManifest(f"{path}: manifest lacks column(s) {', '.join(missing)}")
    base = path.resolve().parent
    rows = []
    for row in table.to_pylist():
        source = Path(str(row["source"]))
        rows.append({
            "tenant_id": str(row["tenant_id"]),
            "document_id": str(row["document_id"]),
            "source": str(source if source.is_absolute() else base / source),
            "groups": None if row.get("groups") is None else [str(g) for g in row["groups"]],
            "version": None if row.get("version") is None else int(row["version"]),
            **_trusted_columns(path, row),
        })
    return _records(rows)


def _trusted_columns(path: Path, row: dict[str, Any]) -> dict[str, Any]:
    """A manifest row's trusted fields, checked here so a bad date fails the manifest, not a worker."""
    try:
        fields = TrustedFields.from_mapping(row)
    except CitadelError as error:
        raise BadManifest(f"{path}: document {row.get('document_id')!r}: {error}") from error
    return _fields_columns(fields)


def _fields_columns(fields: TrustedFields) -> dict[str, Any]:
    return {"owner": fields.owner or None, "status": fields.status, "effective_date": fields.effective_date,
            "supersedes": fields.supersedes}


def records_from_dead_letters(catalog: Catalog, tenant_id: str | None) -> tuple[pa.Table, list[int]]:
    """A replay of the dead letters not yet retried (one tenant, or all), and their ids to mark."""
    letters = catalog.dead_letters(tenant_id)
    rows = []
    for letter in letters:
        fields, trust_front_matter = replayed_fields(letter["meta"])
        rows.append({"tenant_id": letter["tenant_id"], "document_id": letter["meta"]["document_id"],
                     "source": letter["source"], "groups": list(letter["meta"].get("groups", ())), "version": None,
                     **_fields_columns(fields), "trust_front_matter": trust_front_matter})
    return _records(rows), [letter["id"] for letter in letters]


def tenants_of(records: pa.Table) -> list[str]:
    return sorted(set(records.column("tenant_id").to_pylist()))
