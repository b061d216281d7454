"""Big tenants on retriever deployments of their own (serving/ray/dedicated.py, issue 30 item 6).

The built application is inspected without starting Ray (Serve's own graph walk, as
test_cluster_configs does); one test deploys the split app on a local Ray and shows a big tenant's
retrieval served by its own deployment and a small tenant's by the shared one.
"""

from __future__ import annotations

import pytest

pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")

from tests.integration.conftest import EXAMPLES, Home, make_home  # noqa: E402
from tests.redis_server import _free_port  # noqa: E402


def _with_northwind(home: Home) -> Home:
    """Northwind's documents too: Acme is the big tenant, Northwind a small one."""
    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.embedding.factory import make_embedder
    from citadel.ingest.local import Ingestor
    from citadel.ingest.sources import AclSpec, discover

    catalog = SQLiteCatalog(home.config.catalog_path)
    files = [f for f in discover([EXAMPLES / "northwind"], trust_front_matter=True)][:2]
    Ingestor(catalog, make_embedder(home.config.embedding), home.config).ingest(
        "northwind", files, AclSpec.from_file(EXAMPLES / "northwind" / "acl.yaml"))
    sizes = {row["tenant_id"]: row["published_chunks"] for row in catalog.list_tenants()}
    catalog.close()
    assert sizes["acme"] > sizes["northwind"] > 0
    home.config.serving.topology = "split"
    home.config.serving.dedicated_tenant_chunks = sizes["northwind"]  # Acme is above it, Northwind not
    return home


@pytest.fixture(scope="module")
def split_home(tmp_path_factory) -> Home:
    return _with_northwind(make_home(tmp_path_factory.mktemp("dedicated") / "home"))


def test_the_built_app_gives_a_big_tenant_its_own_autoscaled_retriever(split_home):
    from ray.serve._private.build_app import build_app as walk

    from serving.ray.app import build_app_for

    config = split_home.config.model_copy(deep=True)
    config.serving.deployments["retriever_dedicated"].max_replicas = 4
    built = {d.name: d for d in walk(build_app_for(config), name="citadel").deployments}
    assert {"retriever", "retriever-acme"} <= set(built) and "retriever-northwind" not in built
    own, shared = built["retriever-acme"], built["retriever"]
    assert own.func_or_class is shared.func_or_class  # the same Retriever, its own replicas
    assert own._deployment_config.autoscaling_config.max_replicas == 4
    assert shared._deployment_config.autoscaling_config.max_replicas == 3
    assert own._deployment_config.request_router_config.request_router_class.endswith("LatencyAwareRouter")

    config.serving.topology = "fused"
    assert "retriever-acme" not in {d.name for d in walk(build_app_for(config), name="citadel").deployments}


def test_the_routed_handle_sends_a_dedicated_tenant_to_its_deployment():
    from serving.ray.dedicated import DEDICATED_RETRIEVERS, TenantRoutedHandle, retriever_handle

    class Handle:
        def __init__(self, name):
            self.name = name

        def options(self, **options):
            return (self.name, options["multiplexed_model_id"])

    handles = {"retriever": Handle("shared"), DEDICATED_RETRIEVERS: {"acme": Handle("retriever-acme")}}
    routed = retriever_handle(handles)
    assert isinstance(routed, TenantRoutedHandle) and routed.name == "shared"
    assert routed.options(multiplexed_model_id="acme") == ("retriever-acme", "acme")
    assert routed.options(multiplexed_model_id="northwind") == ("shared", "northwind")
    assert retriever_handle({"retriever": handles["retriever"], DEDICATED_RETRIEVERS: {}}) is handles["retriever"]


@pytest.mark.ray
@pytest.mark.slow
def test_a_big_tenants_retrieval_is_served_by_its_own_deployment(split_home):
    from ray import serve

    from cluster.ray_local import local_ray
    from serving.ray.local import APP_NAME, deploy

    config = split_home.config
    config.serving.port = _free_port()
    config.ingest_pipeline.ray_num_cpus = 2
    with local_ray(config.ingest_pipeline):
        try:
            client = httpx.Client(base_url=deploy(config), timeout=60.0)
            for tenant, group in (("acme", "staff"), ("northwind", "sales")):
                headers = split_home.headers(tenant=tenant, user=f"u-{tenant}", groups=(group,))
                response = client.post("/v1/retrieve", json={"query": "discount hotel policy"}, headers=headers)
                assert response.status_code == 200 and response.json()["passages"], response.text

            def held(deployment: str) -> list[str]:
                return serve.get_deployment_handle(deployment, APP_NAME).tenants.remote().result(timeout_s=30)

            assert held("retriever-acme") == ["acme"]
            assert held("retriever") == ["northwind"]  # one replica: the shared one never loaded Acme
        finally:
            serve.shutdown()
