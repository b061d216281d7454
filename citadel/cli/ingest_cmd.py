"""`citadel ingest`: build one job (files and directories for a tenant, a manifest of document records,
or a dead-letter replay; citadel.ingest.jobs) and run it on the engine `make_engine` picks: Ray Data
when ray is installed (a local instance on 127.0.0.1), in-process with `--local` or when it is not.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from citadel.cli.runtime import make_progress
from citadel.wiring import Wiring

if TYPE_CHECKING:
    from citadel.ingest.engine import IngestEngine, TenantSources

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


def choose_engine(runtime: Wiring, local: bool) -> str:
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


def make_engine(runtime: Wiring, local: bool, progress: Callable | None = None) -> "IngestEngine":
    """The engine a job runs on: the one place the choice is made. Ray Data gets a loopback-only local
    instance for the run (or joins the one this process is connected to)."""
    if choose_engine(runtime, local) == LOCAL:
        return runtime.ingestor(progress=progress)
    from cluster.ray_local import local_ray
    from indexing.pipeline import RayDataEngine

    return RayDataEngine(runtime.catalog, runtime.config, progress=progress,
                         connect=lambda: local_ray(runtime.config.ingest_pipeline))


def run_ingest(runtime: Wiring, request: IngestRequest) -> list[dict] | None:
    """Run the job; returns the job reports (one per tenant in-process, one for a Ray job), or None
    when a replay found no dead letters."""
    _validate(request)
    jobs, letter_ids = _jobs(runtime, request)
    if request.retry_dead_letters and not letter_ids:
        return None
    if not jobs:
        raise UsageError("no ingestible files (.md, .pdf, .txt) found")
    update, context = make_progress()
    with context:
        reports = make_engine(runtime, request.local, update).run(jobs)
    for letter_id in letter_ids:
        runtime.catalog.mark_dead_letter_retried(letter_id)
    return [report.to_dict() for report in reports]


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


def _jobs(runtime: Wiring, request: IngestRequest) -> tuple[list["TenantSources"], list[int]]:
    """The job the request names, and the dead letters it replays (to mark once it ran)."""
    from citadel.errors import CitadelError
    from citadel.ingest.jobs import jobs_from_dead_letters, jobs_from_manifest, jobs_from_paths

    try:
        if request.retry_dead_letters:
            return jobs_from_dead_letters(runtime.catalog, request.tenant, runtime.objects)
        if request.manifest:
            return jobs_from_manifest(request.manifest), []
        return jobs_from_paths(request.tenant, request.paths, _acl(request), request.trust_front_matter), []
    except CitadelError as error:  # a bad manifest, a document named twice, an invalid tenant id
        raise UsageError(str(error)) from error


def _acl(request: IngestRequest):
    from citadel.ingest.sources import AclSpec

    return AclSpec.from_file(request.acl_file) if request.acl_file else AclSpec.from_groups(request.groups or [])
