"""Helpers shared by the tests on a local Ray instance."""

from __future__ import annotations

RAY_CPUS = 2
OBJECT_STORE_MB = 200
GOOD = "# Leave policy\n\n## Annual leave\n\nStaff receive 25 days of annual leave each year.\n"


def pipeline_settings(config) -> None:
    """Small, test-sized Ray settings on a config (in place)."""
    config.ingest_pipeline.ray_num_cpus = RAY_CPUS
    config.ingest_pipeline.ray_object_store_mb = OBJECT_STORE_MB


def run_pipeline(runtime, records, acl=None):
    from indexing.pipeline import RayIngestPipeline

    return RayIngestPipeline(runtime.catalog, runtime.config).run(records, acl)
