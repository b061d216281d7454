"""A real multi-node Ray cluster on one machine (issue 17 item 3): `citadel cluster up` starts a head
and two workers as separate raylets on 127.0.0.1; ingestion runs on it through `--address` (Ray Data,
the cluster left running); work placed on a named node runs there; a worker's raylet killed leaves the
others serving; `citadel cluster down` stops exactly the cluster's processes and nothing else."""

from __future__ import annotations

import os
import time

import psutil
import pytest

pytest.importorskip("ray")

from ray_helpers import ingest_acme_on  # noqa: E402
from cluster.multinode import cluster_down, cluster_nodes, cluster_processes, cluster_up, kill_node  # noqa: E402
from cluster.ray_local import AUTH_MODE_ENV, AUTH_TOKEN_ENV, existing_ray  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture
def cluster(make_runtime, monkeypatch):
    runtime = make_runtime()
    monkeypatch.delenv(AUTH_TOKEN_ENV, raising=False)
    monkeypatch.delenv(AUTH_MODE_ENV, raising=False)
    state = cluster_up(runtime.config.home, nodes=3)
    try:
        yield runtime, state
    finally:
        cluster_down(runtime.config.home)


def test_three_raylets_on_loopback_run_ingestion_and_placed_work_and_stop_cleanly(cluster):
    runtime, state = cluster
    nodes = cluster_nodes(state)
    assert len(nodes) == 3 and {n["address"] for n in nodes} == {"127.0.0.1"}
    names = sorted(k for n in nodes for k in n["resources"] if k.startswith("citadel_node_"))
    assert names == ["citadel_node_head", "citadel_node_w1", "citadel_node_w2"]
    assert len({n["port"] for n in nodes}) == 3  # separate raylets, their own ports

    ingest_acme_on(runtime, state.address)
    assert os.environ[AUTH_TOKEN_ENV] == state.auth_token
    assert runtime.catalog.get_document("acme", "travel-policy") is not None

    import ray

    with existing_ray(state.address):
        @ray.remote(num_cpus=0, resources={"citadel_node_w2": 0.01})
        def where() -> str:
            return ray.get_runtime_context().get_node_id()

        w2 = ray.get(where.remote(), timeout=60)
    assert len(cluster_nodes(state)) == 3  # the ingestion and the client left the cluster running

    before = {p.pid for p in cluster_processes(state)}
    assert kill_node(runtime.config.home, "w2") > 0
    deadline = time.monotonic() + 60
    while any(n["alive"] and n["port"] == state.nodes[2].node_manager_port for n in cluster_nodes(state)):
        assert time.monotonic() < deadline, "the killed node is still reported alive"
        time.sleep(1)
    alive = [n for n in cluster_nodes(state) if n["alive"]]
    assert len(alive) == 2 and w2 not in {n.get("node_id") for n in alive}

    stopped = cluster_down(runtime.config.home)
    assert stopped > 0
    time.sleep(1)
    assert not [p for p in before if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert cluster_down(runtime.config.home) == 0  # nothing left to stop
