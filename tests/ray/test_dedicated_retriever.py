"""Big tenants on retriever deployments of their own (serving/ray/dedicated.py).

The built application is inspected without starting Ray (Serve's own graph walk, as
test_cluster_configs does). Three tests share one local Ray running the split app and the citadel-jobs app
(the deployment's runner actor, as a KubeRay RayService runs it): a big tenant's retrieval is served by
its own deployment and a small tenant's by the shared one; and the small tenant moves tier by its HTTP
traffic alone (citadel/segments/tiering.py, with days of seconds): cold a window after its last query,
hot again when queries return, moved by the runner's periodic check, on a local cluster;
and the citadel-jobs app starts the runner again when it is gone.
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


# The tier policy run in seconds on the cluster: days of 2 s, a 2-day window, a 1-day stay, a check every
# 0.5 s, traffic flushed as it comes. Northwind (small) moves by its traffic; Acme is pinned where it is.
TIER_DAY_S = 2.0
TIERS = {"tier_day_s": TIER_DAY_S, "tier_window_days": 2, "tier_min_stay_days": 1.0, "tier_check_interval_s": 0.5,
         "hot_min_queries_per_day": 1.0, "tiny_max_chunks": 0, "hot_min_chunks": 0, "traffic_flush_s": 0.1,
         "tier_overrides": {"acme": "tiny"}}


@pytest.fixture(scope="module")
def cluster(split_home):
    """The split app and the citadel-jobs app (the deployment's runner actor, as a KubeRay RayService
    runs them: indexing/job_runner.py build_app) on one local Ray for the module; yields an HTTP client."""
    from ray import serve

    from cluster.ray_local import local_ray
    from indexing.job_runner import JOBS_APP_NAME, build_app_for as jobs_app
    from serving.ray.local import deploy

    config = split_home.config.model_copy(deep=True)
    config.serving.port = _free_port()
    config.ingest_pipeline.ray_num_cpus = 2
    for field, value in TIERS.items():
        setattr(config.index, field, value)
    config.jobs.embedded_runner = False  # the runner actor alone works the queue and moves tiers
    with local_ray(config.ingest_pipeline):
        try:
            url = deploy(config)  # starts Serve on our port; the jobs app then joins it
            serve.run(jobs_app(config), name=JOBS_APP_NAME, route_prefix=None)
            with httpx.Client(base_url=url, timeout=60.0) as client:
                yield client
        finally:
            serve.shutdown()


def _held(deployment: str, method: str = "tenants"):
    from ray import serve

    from serving.ray.local import APP_NAME

    return getattr(serve.get_deployment_handle(deployment, APP_NAME), method).remote().result(timeout_s=30)


@pytest.mark.ray
@pytest.mark.slow
def test_a_big_tenants_retrieval_is_served_by_its_own_deployment(split_home, cluster):
    for tenant, group in (("acme", "staff"), ("northwind", "sales")):
        headers = split_home.headers(tenant=tenant, user=f"u-{tenant}", groups=(group,))
        response = cluster.post("/v1/retrieve", json={"query": "discount hotel policy"}, headers=headers)
        assert response.status_code == 200 and response.json()["passages"], response.text
    assert _held("retriever-acme") == ["acme"]
    assert _held("retriever") == ["northwind"]  # one replica: the shared one never loaded Acme


@pytest.mark.ray
@pytest.mark.slow
def test_a_quiet_tenant_moves_cold_after_its_window_and_back_hot_with_traffic(split_home, cluster):
    """The runner actor's periodic check (index.tier_check_interval_s) moves Northwind by its HTTP traffic,
    with no publish: hot while queried, cold a window after its last query, hot again once queried, and
    every retrieval answers, from the partition of the tier the catalog names."""
    import time

    import ray
    from ray import serve

    from citadel.catalog.sqlite import SQLiteCatalog
    from indexing.job_runner import ACTOR_NAME, ACTOR_NAMESPACE, JOBS_APP_NAME, KEEPER_DEPLOYMENT

    # The moves below are the deployment's one runner actor's, the one the citadel-jobs app keeps.
    kept = serve.get_deployment_handle(KEEPER_DEPLOYMENT, JOBS_APP_NAME).owner.remote().result(timeout_s=30)
    assert kept == ray.get(ray.get_actor(ACTOR_NAME, namespace=ACTOR_NAMESPACE).owner.remote(), timeout=30)
    catalog = SQLiteCatalog(split_home.config.catalog_path)
    headers = split_home.headers(tenant="northwind", user="u-northwind", groups=("sales",))

    def retrieve() -> None:
        response = cluster.post("/v1/retrieve", json={"query": "discount hotel policy"}, headers=headers)
        assert response.status_code == 200 and response.json()["passages"], response.text

    def tier() -> str:
        return catalog.tier_entries(["northwind"])["northwind"].tier

    def queried_until_hot() -> None:
        deadline = time.monotonic() + 60
        while tier() != "hot":
            assert time.monotonic() < deadline, "a queried tenant never moved hot"
            retrieve()
            time.sleep(0.25)
        retrieve()  # served from the hot partition now
        assert _held("retriever", "tiers") == {"northwind": "hot"}

    try:
        queried_until_hot()
        last_query, hot_at = time.time(), catalog.tier_entries(["northwind"])["northwind"].entered_at
        deadline = time.monotonic() + 60
        while tier() != "cold":  # no traffic: the window empties, the check moves it
            assert time.monotonic() < deadline, "a tenant nobody queries never moved cold"
            time.sleep(0.1)
        cold_at = catalog.tier_entries(["northwind"])["northwind"].entered_at
        assert cold_at > last_query and cold_at - hot_at >= TIER_DAY_S  # after the traffic, and the 1-day stay
        retrieve()  # still answers, from the cold (DiskANN) partition
        assert _held("retriever", "tiers") == {"northwind": "cold"}
        queried_until_hot()  # traffic returns
    finally:
        catalog.close()


@pytest.mark.ray
@pytest.mark.slow
def test_the_jobs_app_starts_the_runner_again_when_it_is_gone(cluster):
    """A runner killed for good (no restart) is started again by the citadel-jobs replica's health check,
    still one named actor (last in the module: it replaces the runner the tests above used)."""
    import ray
    from ray import serve

    from indexing.job_runner import ACTOR_NAME, ACTOR_NAMESPACE, JOBS_APP_NAME, KEEPER_DEPLOYMENT

    keeper = serve.get_deployment_handle(KEEPER_DEPLOYMENT, JOBS_APP_NAME)
    before = keeper.owner.remote().result(timeout_s=30)
    ray.kill(ray.get_actor(ACTOR_NAME, namespace=ACTOR_NAMESPACE), no_restart=True)
    keeper.check_health.remote().result(timeout_s=150)  # what Serve calls every health_check_period_s
    after = keeper.owner.remote().result(timeout_s=30)
    assert after != before
    assert ray.get(ray.get_actor(ACTOR_NAME, namespace=ACTOR_NAMESPACE).owner.remote(), timeout=30) == after
