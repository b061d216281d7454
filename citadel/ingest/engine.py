"""What an ingest engine is: the job it runs and the one protocol every engine implements.

A job is a list of `TenantSources`: per tenant, the sources to ingest (each with the trusted fields
its job states), the ACL spec that gives their groups, and any versions a manifest requests. Both
engines run the same job to the same published result: the local engine (citadel.ingest.local, one
process, one job report per tenant) and Ray Data (indexing.pipeline.RayDataEngine, one streaming job
and one report across its tenants). The CLI builds the job (citadel.ingest.jobs) and picks the engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from citadel.errors import DuplicateDocuments
from citadel.ingest.report import JobReport
from citadel.ingest.sources import AclSpec, DocumentSource
from citadel.types import validate_tenant_id

LOCAL_ENGINE = "local"
RAY_ENGINE = "ray"


def check_unique(keys: Iterable[tuple[str, str]]) -> None:
    """Refuse a job naming a (tenant, document id) twice, listing the first few."""
    seen: set[tuple[str, str]] = set()
    duplicates = []
    for key in keys:
        if key in seen:
            duplicates.append(f"{key[0]}:{key[1]}")
        seen.add(key)
    if duplicates:
        raise DuplicateDocuments(f"documents named more than once: {', '.join(duplicates[:5])}"
                                 + (f" and {len(duplicates) - 5} more" if len(duplicates) > 5 else ""))


@dataclass(frozen=True)
class TenantSources:
    """One tenant's share of an ingest job. Identity and permissions come from here, never from the
    files (citadel.ingest.sources): the sources' ids and trusted fields, the ACL spec's groups, and
    `versions` (document id → the catalog version a manifest requests; absent: the catalog numbers it)."""

    tenant_id: str
    sources: tuple[DocumentSource, ...]
    acl: AclSpec
    versions: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_tenant_id(self.tenant_id)  # before the catalog or a directory sees it
        check_unique((self.tenant_id, source.document_id) for source in self.sources)


@runtime_checkable
class IngestEngine(Protocol):
    """Runs an ingest job: parse, chunk, embed, build, verify and publish each tenant's sources.

    One bad document never stops the job (it is reported and dead-lettered); a tenant published with
    another embedding model is re-embedded first. Returns the job reports (the local engine: one per
    tenant; Ray Data: one for the whole job); an empty job returns none.
    """

    name: str

    def run(self, jobs: Sequence[TenantSources]) -> list[JobReport]: ...
