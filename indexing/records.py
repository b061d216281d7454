"""The pipeline's input: one record per document (tenant, doc id, source, ACL groups, version, the
trusted fields of citadel.ingest.sources.TrustedFields), as an Arrow table in RECORD_SCHEMA.

Built from an ingest job (citadel.ingest.engine.TenantSources, what RayDataEngine runs), from a
directory tree for one tenant, or straight from a manifest (citadel.ingest.jobs reads and checks it;
the records keep its row order), which is how benchmarks feed a many-tenant corpus.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa

from citadel.errors import CitadelError
from citadel.ingest.engine import TenantSources, check_unique
from citadel.ingest.jobs import DocumentRecord, jobs_from_paths, read_document_records
from citadel.ingest.sources import AclSpec, DocumentSource, TrustedFields
from citadel.ingest.uploads import StoredRawFile
from indexing.stages import RECORD_SCHEMA


def _records(rows: list[dict[str, Any]]) -> pa.Table:
    """The table, with each row's position in the job (`doc_order`: new rows are built in this order)."""
    check_unique((row["tenant_id"], row["document_id"]) for row in rows)
    for order, row in enumerate(rows):
        row["doc_order"] = order
    return pa.Table.from_pylist(rows, schema=RECORD_SCHEMA)


def records_from_jobs(jobs: Sequence[TenantSources]) -> tuple[pa.Table, AclSpec | None]:
    """The records of a job and the ACL spec the pipeline applies to rows without groups.

    A one-tenant job keeps its spec whole (defaults, globs, and the id a trusted front matter may
    give are resolved by the workers exactly as the local engine does); with several tenants each
    row carries the groups its own tenant's spec gives it. Only files can travel to Ray workers."""
    single = len(jobs) == 1
    rows = []
    for job in jobs:
        for source in job.sources:
            _check_file(source)
            groups = None if single else list(job.acl.groups_for(source.document_id, source.source))
            fields = source.fields if single else with_acl_governance(source, job.acl)
            rows.append({"tenant_id": job.tenant_id, "document_id": source.document_id, "source": source.source,
                         "groups": groups, "version": job.versions.get(source.document_id),
                         **_fields_columns(fields), "trust_front_matter": source.trust_front_matter,
                         "replay": source.replay})
    return _records(rows), (jobs[0].acl if single else None)


def _check_file(source: DocumentSource) -> None:
    """A record names one file that is read and recorded as the source (a path, or an upload's raw
    key, which the workers read from the object store): an inline document, or a file known by
    another name, can run only on the local engine."""
    if isinstance(source, StoredRawFile):
        return
    if str(getattr(source, "path", None)) != source.source:
        raise CitadelError(f"{source.source}: the Ray engine reads files named by their source; this document "
                           "needs the local engine", code="not_a_file")


def records_from_paths(tenant_id: str, paths: Sequence[Path], trust_front_matter: bool = False) -> pa.Table:
    """Every ingestible file under `paths`, in the order `discover` gives (the in-process order).
    Groups stay null: the job's ACL spec decides them, as in the in-process path."""
    records, _ = records_from_jobs(jobs_from_paths(tenant_id, paths, AclSpec(), trust_front_matter))
    return records


def records_from_manifest(path: Path) -> pa.Table:
    """A manifest's rows in its order, checked (BadManifest, DuplicateDocuments)."""
    return _records([_manifest_row(record) for record in read_document_records(path)])


def _manifest_row(record: DocumentRecord) -> dict[str, Any]:
    return {"tenant_id": record.tenant_id, "document_id": record.document_id, "source": record.source,
            "groups": None if record.groups is None else list(record.groups), "version": record.version,
            **_fields_columns(record.fields), "trust_front_matter": False}


def with_acl_governance(source: DocumentSource, acl: AclSpec) -> TrustedFields:
    """The source's trusted fields with its tenant's ACL-spec governance under them (a row of a
    many-tenant job carries its own tenant's, as it carries its groups)."""
    return dataclasses.replace(source.fields, governance=source.fields.governance.over(
        acl.governance_for(source.document_id, source.source)))


def _fields_columns(fields: TrustedFields) -> dict[str, Any]:
    return {"owner": fields.owner or None, "status": fields.status, "effective_date": fields.effective_date,
            "supersedes": fields.supersedes, **fields.governance.to_dict()}


def tenants_of(records: pa.Table) -> list[str]:
    return sorted(set(records.column("tenant_id").to_pylist()))
