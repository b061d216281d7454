"""A real multi-node Ray cluster on one machine: `citadel cluster up --nodes N`
starts a head and N-1 worker nodes as separate raylets on 127.0.0.1, each with its own ports, CPUs and
a custom resource naming it (`citadel_node_head`, `citadel_node_w1`, …; every worker also has
`citadel_worker`), so work can be placed on, and a drill can kill, one node. `citadel cluster down`
stops only this cluster's processes. `citadel up --address` and `citadel ingest --address` then run
on it as on any existing cluster (the KubeRay path).

Loopback only (DESIGN.md §8). Ray refuses a second node unless its "cluster mode" switch is on, and
with the switch on it trades the node address 127.0.0.1 for the machine's routable one (measured here:
192.0.2.2, every port with it). So the head starts with the switch off, and each worker node's
`ray start` runs in a small wrapper that allows the join and keeps the address given; its children
inherit the switch off, so they also stay on loopback. The nodes' addresses are checked after start.

The processes are found by what only this cluster's have in their command line: its temporary
directory (a short path: Ray's socket paths are bounded) and its GCS address. `down` signals those and
their descendants, waits, then kills what is left — never `ray stop`, which would stop every Ray
process on the machine. Auth: a token private to this cluster, kept with its state (0600), which
every node and client gets through RAY_AUTH_TOKEN.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from cluster.ray_local import AUTH_MODE_ENV, AUTH_TOKEN_ENV, LOOPBACK, LOOPBACK_SWITCH_ENV, TOKEN_BYTES

STATE_FILE = "ray-cluster.json"
# Ports each node takes, from its base: node manager, object manager, agent, metrics, runtime-env agent,
# agent gRPC, Ray client server; then its workers' range.
NODE_PORTS = 7
WORKER_PORTS = 40
PORTS_PER_NODE = NODE_PORTS + WORKER_PORTS + 3
MAX_NODES = 8
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
HEAD = "head"

# Runs `ray start` for a worker node: allows the join and keeps 127.0.0.1 (see the module docstring).
WORKER_START = """
import sys
import ray._private.ray_constants as constants
constants.ENABLE_RAY_CLUSTER = True
import ray._private.services as services
services.resolve_ip_for_localhost = lambda host: host
from ray.scripts.scripts import main
sys.argv = ["ray"] + sys.argv[1:]
main()
"""
# Ray may print its own lines to stdout (a dead raylet's heartbeat warning, say): the answer is the
# one line that starts with this mark.
NODES_MARK = "citadel-nodes: "
NODES_PROBE = """
import json, ray
ray.init(address="{address}", log_to_driver=False, logging_level="ERROR")
print("{mark}" + json.dumps([{{"address": n["NodeManagerAddress"], "alive": n["Alive"], "port": n["NodeManagerPort"],
                   "resources": n["Resources"]}} for n in ray.nodes()]))
ray.shutdown()
"""


class ClusterError(RuntimeError):
    """A cluster is already up, did not come up, or is not on loopback."""


@dataclass(frozen=True)
class Node:
    name: str
    num_cpus: int
    base_port: int

    @property
    def resource(self) -> str:
        return f"citadel_node_{self.name}"

    @property
    def node_manager_port(self) -> int:
        return self.base_port


@dataclass
class ClusterState:
    address: str
    temp_dir: str
    gcs_port: int
    nodes: list[Node]
    auth_token: str

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "nodes": [asdict(n) for n in self.nodes]}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> "ClusterState":
        data = json.loads(text)
        return cls(data["address"], data["temp_dir"], int(data["gcs_port"]), [Node(**n) for n in data["nodes"]],
                   data["auth_token"])


def state_path(home: Path) -> Path:
    return Path(home).resolve() / "run" / STATE_FILE


def read_state(home: Path) -> ClusterState | None:
    path = state_path(home)
    return ClusterState.from_json(path.read_text()) if path.exists() else None


# ---------------------------------------------------------------------- ports
def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port_block(size: int, low: int = 20_000, high: int = 40_000, tries: int = 200) -> int:
    """A base port whose next `size` ports are all free on loopback."""
    for _ in range(tries):
        base = secrets.randbelow(high - low - size) + low
        if all(_port_free(p) for p in range(base, base + size)):
            return base
    raise ClusterError(f"no free block of {size} ports on {LOOPBACK}")


def _node_args(node: Node) -> list[str]:
    b = node.base_port
    return [f"--node-ip-address={LOOPBACK}", f"--num-cpus={node.num_cpus}", "--disable-usage-stats",
            f"--resources={json.dumps({node.resource: 1, **({'citadel_worker': 1} if node.name != HEAD else {})})}",
            f"--node-manager-port={b}", f"--object-manager-port={b + 1}", f"--dashboard-agent-listen-port={b + 2}",
            f"--metrics-export-port={b + 3}", f"--runtime-env-agent-port={b + 4}",
            f"--dashboard-agent-grpc-port={b + 5}", f"--min-worker-port={b + NODE_PORTS}",
            f"--max-worker-port={b + NODE_PORTS + WORKER_PORTS - 1}"]


def _environment(token: str) -> dict[str, str]:
    return {**os.environ, LOOPBACK_SWITCH_ENV: "0", AUTH_MODE_ENV: "token", AUTH_TOKEN_ENV: token}


def _ray_start(args: list[str], env: dict[str, str], worker: bool, log) -> None:
    command = ([sys.executable, "-c", WORKER_START, "start", *args] if worker
               else [str(Path(sys.executable).with_name("ray")), "start", *args])
    done = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=START_TIMEOUT_S)
    if done.returncode != 0:
        raise ClusterError(f"ray start failed ({done.returncode}); see {log.name}")


# ---------------------------------------------------------------------- up, down, a node's processes
def cluster_up(home: Path, nodes: int = 3, cpus_per_node: int = 1, object_store_mb: int = 100,
               head_cpus: int | None = None) -> ClusterState:
    """Start a head and `nodes - 1` workers on loopback; wait until all are registered there.
    `head_cpus` (default `cpus_per_node`): 0 keeps tasks and replicas off the head, which then runs
    only the GCS, Serve's controller and its HTTP proxy (as a KubeRay head with num-cpus 0)."""
    if not 1 <= nodes <= MAX_NODES:
        raise ClusterError(f"a local cluster has 1 to {MAX_NODES} nodes")
    if head_cpus is not None and (head_cpus < 0 or (head_cpus == 0 and nodes == 1)):
        raise ClusterError("head_cpus must be >= 0, and a cluster of one node needs CPUs on its head")
    existing = read_state(home)
    if existing is not None and cluster_processes(existing):
        raise ClusterError(f"a local cluster is already up at {existing.address}; run `citadel cluster down`")
    state_path(home).parent.mkdir(parents=True, exist_ok=True)
    base = free_port_block(PORTS_PER_NODE * nodes + 2)
    gcs_port, client_port = base, base + 1
    node_list = [Node(HEAD if i == 0 else f"w{i}", cpus_per_node if i or head_cpus is None else head_cpus,
                      base + 2 + i * PORTS_PER_NODE) for i in range(nodes)]
    state = ClusterState(f"{LOOPBACK}:{gcs_port}", tempfile.mkdtemp(prefix="citadel-ray-"), gcs_port, node_list,
                         secrets.token_hex(TOKEN_BYTES))
    path = state_path(home)
    path.write_text(state.to_json())
    path.chmod(0o600)
    env = _environment(state.auth_token)
    memory = f"--object-store-memory={object_store_mb * 1024 * 1024}"
    try:
        with open(path.with_suffix(".log"), "ab") as log:
            _ray_start(["--head", f"--port={gcs_port}", f"--ray-client-server-port={client_port}",
                        "--include-dashboard=false", f"--temp-dir={state.temp_dir}", memory,
                        *_node_args(node_list[0])], env, False, log)
            for node in node_list[1:]:
                _ray_start([f"--address={state.address}", memory, *_node_args(node)], env, True, log)
        wait_for_nodes(state, nodes)
    except BaseException:
        cluster_down(home)
        raise
    return state


def cluster_nodes(state: ClusterState) -> list[dict]:
    """The cluster's nodes as Ray sees them (from a short-lived client process)."""
    probe = subprocess.run([sys.executable, "-c", NODES_PROBE.format(address=state.address, mark=NODES_MARK)],
                           env=_environment(state.auth_token), capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        raise ClusterError(f"could not read the cluster's nodes: {probe.stderr.strip()[-300:]}")
    answer = [line for line in probe.stdout.splitlines() if line.startswith(NODES_MARK)]
    if not answer:
        raise ClusterError(f"the cluster's nodes probe printed no answer: {probe.stdout.strip()[-300:]}")
    return json.loads(answer[-1][len(NODES_MARK):])


def wait_for_nodes(state: ClusterState, count: int, timeout_s: float = START_TIMEOUT_S) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [n for n in cluster_nodes(state) if n["alive"]]
        if len(alive) >= count:
            addresses = {n["address"] for n in alive}
            if addresses != {LOOPBACK}:
                raise ClusterError(f"nodes registered on {sorted(addresses)}, not only {LOOPBACK}")
            return alive
        if time.monotonic() > deadline:
            raise ClusterError(f"{len(alive)} of {count} nodes came up in {timeout_s:g} s")
        time.sleep(1.0)


def _matches(process: psutil.Process, marks: tuple[str, ...]) -> bool:
    try:
        line = " ".join(process.cmdline())
    except psutil.Error:
        return False
    return any(mark in line for mark in marks)


def cluster_processes(state: ClusterState, node: Node | None = None) -> list[psutil.Process]:
    """This cluster's processes (or one node's: its raylet and what runs under it), with descendants."""
    if node is None:
        marks = (state.temp_dir, f"{LOOPBACK}:{state.gcs_port}", f"--gcs_server_port={state.gcs_port}")
    else:
        marks = (f"--node_manager_port={node.node_manager_port}",)
    me = os.getpid()
    found = {p.pid: p for p in psutil.process_iter() if p.pid != me and _matches(p, marks)}
    for process in list(found.values()):
        try:
            found.update({c.pid: c for c in process.children(recursive=True) if c.pid != me})
        except psutil.Error:
            continue
    return list(found.values())


def _signal(processes: list[psutil.Process], kill: bool) -> list[psutil.Process]:
    """SIGTERM (or SIGKILL) each process, then wait; returns those still alive."""
    for process in processes:
        try:
            process.kill() if kill else process.terminate()
        except psutil.Error:
            pass
    return psutil.wait_procs(processes, timeout=STOP_TIMEOUT_S)[1]


def _stop(processes: list[psutil.Process]) -> int:
    _signal(_signal(processes, kill=False), kill=True)
    return len(processes)


def cluster_down(home: Path) -> int:
    """Stop this cluster's processes only; returns how many were signalled."""
    state = read_state(home)
    if state is None:
        return 0
    stopped = _stop(cluster_processes(state))
    shutil.rmtree(state.temp_dir, ignore_errors=True)
    state_path(home).unlink(missing_ok=True)
    return stopped


def kill_node(home: Path, name: str) -> int:
    """SIGKILL one worker node's raylet and everything under it (the node-kill drill)."""
    state = read_state(home)
    node = next((n for n in state.nodes if n.name == name), None) if state else None
    if node is None or node.name == HEAD:
        raise ClusterError(f"no worker node {name!r} in this home's cluster")
    processes = cluster_processes(state, node)
    _signal(processes, kill=True)
    return len(processes)
