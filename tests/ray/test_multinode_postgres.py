"""A multi-node Ray cluster on one machine (`citadel cluster up`) with the
Postgres catalog every node shares and the partitions on a directory every node sees (the home).
Ingestion runs on the cluster through `--address`, then the app is served on the same cluster as
`citadel up --address` serves it; a signed-in Acme user's retrieve and answer come back with passages
and citations of the ingested documents, read by replicas on more than one node (worker nodes
included); the catalog's rows are in Postgres, not in a SQLite file; a worker's raylet killed under
serving leaves the app answering from the other worker; `cluster down` leaves no pid. (One test for
all of it: each 3-node cluster costs a minute on two cores.)"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")

from ray_helpers import ingest_acme_on  # noqa: E402
from cluster.multinode import HEAD, cluster_down, cluster_nodes, cluster_processes, cluster_up, kill_node  # noqa: E402
from cluster.ray_local import AUTH_MODE_ENV, AUTH_TOKEN_ENV, LOOPBACK_SWITCH_ENV, existing_ray  # noqa: E402
from tests.postgres_server import fresh_database, postgres_dsn  # noqa: E402,F401  (a session fixture)
from tests.redis_server import _free_port  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]
SERVE_TIMEOUT_S = 150.0
REPLICA = "ServeReplica:citadel:"  # the class name Serve gives the app's replica actors


@pytest.fixture
def shared_catalog(postgres_dsn):  # noqa: F811
    dsn, drop = fresh_database(postgres_dsn)
    yield dsn
    drop()


@pytest.fixture
def cluster(make_runtime, shared_catalog, monkeypatch):
    """A Postgres-catalog home and a 3-node cluster (a head without CPUs for work: the replicas and the
    ingestion tasks run on the workers, as on a KubeRay cluster whose head has num-cpus 0)."""
    for variable in (AUTH_TOKEN_ENV, AUTH_MODE_ENV, LOOPBACK_SWITCH_ENV):
        monkeypatch.delenv(variable, raising=False)  # restored after: use_address and ray set them
    runtime = make_runtime(catalog={"dsn": shared_catalog, "backend": "postgres"})
    state = cluster_up(runtime.config.home, nodes=3, cpus_per_node=1, head_cpus=0)
    try:
        yield runtime, state
    finally:
        from serving.ray.launcher import down

        try:
            down(runtime.config)  # the serving supervisor, if the test left it running
        finally:
            cluster_down(runtime.config.home)


def _replica_nodes(address: str) -> dict[str, str]:
    """Each live replica of the app (its actor id) and the name of the node it runs on."""
    import ray
    from ray._private import state as ray_state

    with existing_ray(address):
        names = {n["NodeID"]: next(k for k in n["Resources"] if k.startswith("citadel_node_"))
                 for n in ray.nodes() if n["Alive"]}
        actors = ray_state.actors().values()
    return {a["ActorID"]: names.get(a["Address"]["NodeID"], "?").removeprefix("citadel_node_")
            for a in actors if a["ActorClassName"].startswith(REPLICA) and a["State"] == "ALIVE"}


def test_ingestion_and_serving_on_three_nodes_share_the_postgres_catalog(cluster, shared_catalog):
    import psycopg

    from citadel.identity.context import sign_user_context
    from citadel.identity.keys import current_service_key
    from serving.ray.launcher import LOCAL_APP_SERVICE, token_path, up

    runtime, state = cluster
    config = runtime.config
    nodes = cluster_nodes(state)
    assert len(nodes) == 3 and {n["address"] for n in nodes} == {"127.0.0.1"}
    names = sorted(k for n in nodes for k in n["resources"] if k.startswith("citadel_node_"))
    assert names == ["citadel_node_head", "citadel_node_w1", "citadel_node_w2"]
    assert len({n["port"] for n in nodes}) == 3  # separate raylets, their own ports
    before = {p.pid for p in cluster_processes(state)}

    # Ingestion on the cluster, as `citadel ingest --address` runs it.
    ingest_acme_on(runtime, state.address)
    assert os.environ[AUTH_TOKEN_ENV] == state.auth_token

    # The catalog is Postgres: its rows are there (read apart from the app's pool), no SQLite file exists.
    with psycopg.connect(shared_catalog) as conn:
        documents = {r[0] for r in conn.execute(
            "SELECT document_id FROM documents WHERE tenant_id = 'acme' AND status = 'published'")}
        [(segment,)] = conn.execute("SELECT segment_id FROM partitions WHERE tenant_id = 'acme'").fetchall()
    assert {"travel-policy", "expense-policy", "executive-allowance"} <= documents, documents
    assert not config.catalog_path.exists()
    # The published segment lies under the home every node sees, at an absolute path.
    assert (Path(config.home).resolve() / "partitions" / "acme" / segment).is_dir()

    # Serving on the same cluster, as `citadel up --address` does (the supervisor joins the cluster).
    config.serving.port = _free_port()
    url = up(config, timeout_s=SERVE_TIMEOUT_S)
    before |= {p.pid for p in cluster_processes(state)}  # the replicas, Serve's controller and proxy
    replicas = _replica_nodes(state.address)
    assert len(replicas) >= 2, replicas
    assert HEAD not in replicas.values(), f"the head has no CPUs for replicas: {replicas}"
    assert len(set(replicas.values())) >= 2, f"replicas on one node only: {replicas}"

    key = current_service_key(config.service_keys_path, LOCAL_APP_SERVICE)
    service_token = token_path(config, LOCAL_APP_SERVICE).read_text().strip()

    def headers(groups: tuple[str, ...] = ("staff",)) -> dict:
        context = sign_user_context(key, "acme", "alice", list(groups), 300, config.identity.audience, time.time())
        return {"authorization": f"Bearer {service_token}", "x-citadel-user-context": context}

    with httpx.Client(base_url=url, timeout=60.0) as client:
        for _ in range(4):  # several requests: the proxy spreads them over the replicas (all on workers)
            response = client.post("/v1/retrieve", json={"query": "hotel limit per night", "top_k": 3},
                                   headers=headers())
            assert response.status_code == 200, response.text
            passages = response.json()["passages"]
            assert passages and {p["document_id"] for p in passages} <= documents
            assert "travel-policy" in {p["document_id"] for p in passages}
        answer = client.post("/v1/answer", json={"question": "What is the hotel limit per night in London?"},
                             headers=headers())
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert not body["refused"] and body["citations"], body
        assert "travel-policy" in {c["document_id"] for c in body["citations"]}
        exec_only = client.post("/v1/retrieve", json={"query": "executive allowance", "top_k": 10},
                                headers=headers()).json()
        assert all(p["document_id"] != "executive-allowance" for p in exec_only["passages"])

    # A second catalog on the same database sees what the cluster wrote (answers logged included).
    from citadel.catalog.postgres import PostgresCatalog

    second = PostgresCatalog(shared_catalog, min_size=0, max_size=1)
    try:
        assert second.published_segment("acme") == segment
        assert second.get_document("acme", "travel-policy") is not None
        deadline = time.monotonic() + 10
        while body["request_id"] not in {row["request_id"] for row in second.answer_log("acme")}:
            assert time.monotonic() < deadline, "the replica's answer is not in the shared answer log"
            time.sleep(0.25)
    finally:
        second.close()

    # A worker's raylet killed under serving (the node-kill drill, small): the node is reported dead
    # and the app goes on answering from the replica on the other worker.
    assert kill_node(config.home, "w2") > 0
    deadline = time.monotonic() + 60
    while any(n["alive"] and n["port"] == state.nodes[2].node_manager_port for n in cluster_nodes(state)):
        assert time.monotonic() < deadline, "the killed node is still reported alive"
        time.sleep(1)
    with httpx.Client(base_url=url, timeout=60.0) as client:
        statuses = [client.post("/v1/retrieve", json={"query": "hotel limit per night", "top_k": 3},
                                headers=headers()).status_code for _ in range(6)]
    assert statuses[-3:] == [200, 200, 200], statuses  # at most the first calls met the dead replica

    from serving.ray.launcher import RunFiles, down

    supervisor = int(RunFiles.of(config).pid.read_text())
    assert down(config) and not psutil.pid_exists(supervisor)
    stopped = cluster_down(config.home)
    assert stopped > 0
    time.sleep(1)
    assert not [p for p in before if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert cluster_down(config.home) == 0
