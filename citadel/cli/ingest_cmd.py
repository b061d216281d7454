"""`citadel ingest`: on Ray Data when ray is installed (a local instance on 127.0.0.1), in-process
with `--local` or when it is not. Directories, a manifest of document records, or a dead-letter replay.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from citadel.cli.runtime import Runtime, make_progress

LOCAL = "local"
RAY = "ray"


class UsageError(Exception):
    """A bad combination of options; the CLI prints it and exits 2."""


@dataclass(frozen=True)
class IngestRequest:
    paths: list[Path]
    tenant: str | None
    groups: list[str] | None
    acl_file: Path | None
    manifest: Path | None
    retry_dead_letters: bool
    local: bool
    trust_front_matter: bool = False  # the files' front matter may set id, groups, status... (paths only)


def choose_engine(runtime: Runtime, local: bool) -> str:
    """--local or engine=local → in-process; otherwise Ray Data when ray (and indexing/) import."""
    engine = runtime.config.ingest_pipeline.engine
    if local or engine == LOCAL:
        return LOCAL
    available = all(importlib.util.find_spec(name) is not None for name in ("ray", "indexing"))
    if available:
        return RAY
    if engine == RAY:
        raise UsageError("ingest_pipeline.engine is 'ray' but ray is not installed (pip install 'ray[data]')")
    return LOCAL


def run_ingest(runtime: Runtime, request: IngestRequest) -> list[dict] | None:
    """Run the job; returns the job reports (one per tenant in-process, one for a Ray job), or None
    when a replay found no dead letters."""
    _validate(request)
    engine = choose_engine(runtime, request.local)
    update, context = make_progress()
    with context:
        if engine == RAY:
            report = _run_on_ray(runtime, request, update)
            return None if report is None else [report]
        return _run_in_process(runtime, request, update)


def _validate(request: IngestRequest) -> None:
    if request.trust_front_matter and (request.retry_dead_letters or request.manifest):
        raise UsageError("--trust-front-matter applies to files and directories named here; a manifest states "
                         "trusted fields in its columns and a replay keeps its original job's choice")
    if request.retry_dead_letters:
        if request.paths or request.manifest:
            raise UsageError("--retry-dead-letters replays stored letters; give no paths or --manifest")
        return
    if request.manifest:
        if request.paths or request.tenant or request.groups is not None or request.acl_file:
            raise UsageError("--manifest names tenants, sources and groups itself; give nothing else")
        return
    if not request.paths:
        raise UsageError("give files or directories to ingest (or --manifest, or --retry-dead-letters)")
    if not request.tenant:
        raise UsageError("--tenant is required with paths")
    if (request.groups is None) == (request.acl_file is None):
        raise UsageError("give exactly one of --groups or --acl")


def _acl(request: IngestRequest):
    from citadel.sources import AclSpec

    return AclSpec.from_file(request.acl_file) if request.acl_file else AclSpec.from_groups(request.groups or [])


# ------------------------------------------------------------------------------------------- Ray
def _run_on_ray(runtime: Runtime, request: IngestRequest, progress: Callable) -> dict | None:
    from cluster.ray_local import local_ray
    from indexing.records import records_from_dead_letters, records_from_manifest, records_from_paths, tenants_of

    from citadel.errors import CitadelError

    catalog = runtime.catalog
    letter_ids: list[int] = []
    acl = None
    try:
        if request.retry_dead_letters:
            records, letter_ids = records_from_dead_letters(catalog, request.tenant)
            if not letter_ids:
                return None
        elif request.manifest:
            records = records_from_manifest(request.manifest)
        else:
            records = records_from_paths(request.tenant, request.paths, request.trust_front_matter)
            acl = _acl(request)
    except CitadelError as error:  # a bad manifest, a document named twice
        raise UsageError(str(error)) from error
    if records.num_rows == 0:
        raise UsageError("no ingestible files (.md, .pdf, .txt) found")
    _reembed_changed_tenants(runtime, tenants_of(records), progress)
    with local_ray(runtime.config.ingest_pipeline):
        from indexing.pipeline import RayIngestPipeline

        report = RayIngestPipeline(catalog, runtime.config, progress=progress).run(records, acl)
    for letter_id in letter_ids:
        catalog.mark_dead_letter_retried(letter_id)
    return report.to_dict()


def _reembed_changed_tenants(runtime: Runtime, tenant_ids: list[str], progress: Callable) -> None:
    """Tenants published with another embedding model are re-embedded before the Ray job builds on
    them (the in-process Ingestor does this itself): a build never mixes two models' vectors."""
    from citadel.embedding.factory import embedder_identity
    from citadel.reembed import needs_reembed

    model_id, dim = embedder_identity(runtime.config.embedding)
    changed = [t for t in tenant_ids
               if needs_reembed(runtime.config.partitions_dir, t, runtime.catalog.published_segment(t), model_id, dim)]
    if changed:
        ingestor = runtime.ingestor(progress=progress)
        for tenant_id in changed:
            ingestor.reembed(tenant_id)


# ------------------------------------------------------------------------------------ in-process
def _run_in_process(runtime: Runtime, request: IngestRequest, progress: Callable) -> list[dict] | None:
    from citadel.sources import discover

    ingestor = runtime.ingestor(progress=progress)
    if request.retry_dead_letters:
        if not request.tenant:
            raise UsageError("--retry-dead-letters in-process needs --tenant")
        report = ingestor.retry_dead_letters(request.tenant)
        return None if report is None else [report.to_dict()]
    if request.manifest:
        return [ingestor.ingest(tenant_id, files, acl).to_dict()
                for tenant_id, files, acl in _manifest_jobs(request.manifest)]
    files = discover(request.paths, trust_front_matter=request.trust_front_matter)
    if not files:
        raise UsageError("no ingestible files (.md, .pdf, .txt) found")
    return [ingestor.ingest(request.tenant, files, _acl(request)).to_dict()]


def _manifest_jobs(manifest: Path):
    """(tenant, files, ACL spec) per tenant of a manifest, for the in-process path, with each row's
    trusted fields. The in-process path lets the catalog number versions; a manifest `version` column
    needs the Ray engine."""
    from citadel.errors import CitadelError
    from citadel.sources import AclSpec, SourceFile, TrustedFields
    from indexing.records import records_from_manifest

    try:
        records = records_from_manifest(manifest)
    except CitadelError as error:  # a bad manifest: an invalid tenant id, a document named twice
        raise UsageError(str(error)) from error
    if records.column("version").null_count != records.num_rows:
        raise UsageError("a manifest with versions needs the Ray engine (drop --local)")
    jobs: dict[str, tuple[list, AclSpec]] = {}
    for row in records.to_pylist():
        files, acl = jobs.setdefault(row["tenant_id"], ([], AclSpec()))
        files.append(SourceFile(Path(row["source"]), row["document_id"], row["source"],
                                TrustedFields.from_mapping(row)))
        if row["groups"] is not None:
            acl.documents[row["document_id"]] = tuple(row["groups"])
    return [(tenant_id, files, acl) for tenant_id, (files, acl) in sorted(jobs.items())]
