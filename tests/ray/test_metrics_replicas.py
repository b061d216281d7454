"""Every gateway replica's metrics reach a scrape (serving.metrics_multiprocess_dir): the Serve app on a local
Ray with the gateway (fused) at two replicas; whichever replica answers GET /metrics, a counter shows every
request both replicas served. The directory's per-process files show that both replicas did serve some."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")

from tests.integration.conftest import make_home  # noqa: E402
from tests.redis_server import _free_port  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]
REQUESTS = 40
SCRAPES = 6
REPLICAS = 2


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory):
    from ray import serve

    from cluster.ray_local import local_ray
    from serving.ray.local import deploy

    home = make_home(tmp_path_factory.mktemp("metrics-replicas") / "home")
    config = home.config
    config.serving.topology = "fused"
    config.serving.port = _free_port()
    config.serving.deployments["fused"].min_replicas = config.serving.deployments["fused"].max_replicas = REPLICAS
    config.ingest_pipeline.ray_num_cpus = 2
    with local_ray(config.ingest_pipeline):
        try:
            url = deploy(config)
            with httpx.Client(base_url=url, timeout=60.0) as client:
                yield home, client
        finally:
            serve.shutdown()


def _requests_counted(text: str, tenant: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "citadel_requests_total"
               and sample.labels == {"endpoint": "retrieve", "tenant": tenant, "status": "200"})


def _counted_by_process(directory, tenant: str) -> dict[str, float]:
    """Each replica process's own count, read from its counter file."""
    from prometheus_client.multiprocess import MultiProcessCollector

    counts = {}
    for path in directory.glob("counter_*.db"):
        families = MultiProcessCollector.merge([str(path)])
        counts[path.stem] = sum(s.value for f in families for s in f.samples
                                if s.name == "citadel_requests_total" and s.labels.get("tenant") == tenant
                                and s.labels.get("endpoint") == "retrieve")
    return counts


def test_a_scrape_through_serve_counts_every_replicas_requests(two_replicas):
    home, client = two_replicas
    for n in range(REQUESTS):  # one fresh user each: no budget or cache in the way
        response = client.post("/v1/retrieve", json={"query": "hotel limit"},
                               headers=home.headers(user=f"metrics-{n}-{uuid.uuid4().hex[:6]}"))
        assert response.status_code == 200, response.text
    for _ in range(SCRAPES):
        scrape = client.get("/metrics", headers=home.metrics_headers())
        assert scrape.status_code == 200, scrape.text
        assert _requests_counted(scrape.text, "acme") == REQUESTS
    by_process = _counted_by_process(home.config.metrics_multiprocess_path, "acme")
    assert sum(by_process.values()) == REQUESTS
    assert len([count for count in by_process.values() if count]) == REPLICAS, by_process
