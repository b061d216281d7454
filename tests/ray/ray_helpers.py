"""Helpers shared by the tests on a local Ray instance."""

from __future__ import annotations

from pathlib import Path

RAY_CPUS = 2
OBJECT_STORE_MB = 200
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GOOD = "# Leave policy\n\n## Annual leave\n\nStaff receive 25 days of annual leave each year.\n"


def pipeline_settings(config) -> None:
    """Small, test-sized Ray settings on a config (in place)."""
    config.ingest_pipeline.ray_num_cpus = RAY_CPUS
    config.ingest_pipeline.ray_object_store_mb = OBJECT_STORE_MB


def run_pipeline(runtime, records, acl=None):
    from indexing.pipeline import RayIngestPipeline

    return RayIngestPipeline(runtime.catalog, runtime.config).run(records, acl)


def ingest_acme_on(runtime, address: str) -> dict:
    """Ingest examples/acme on the cluster at `address`, as `citadel ingest --address` does; its report."""
    import os

    from citadel.cli.cluster_cmd import use_address
    from citadel.cli.ingest_cmd import IngestRequest, run_ingest
    from cluster.ray_local import AUTH_TOKEN_ENV

    use_address(runtime.config, address)
    assert os.environ.get(AUTH_TOKEN_ENV), "the cluster's token is set for the driver"
    request = IngestRequest(paths=[EXAMPLES / "acme"], tenant="acme", groups=None,
                            acl_file=EXAMPLES / "acme" / "acl.yaml", manifest=None, retry_dead_letters=False,
                            local=False, trust_front_matter=True)
    [report] = run_ingest(runtime, request)
    assert report["published"] >= 4 and report["failed"] == 0, report
    return report
