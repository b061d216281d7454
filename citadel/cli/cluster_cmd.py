"""`citadel cluster up|down|status|kill-node`: a multi-node Ray cluster on this machine (cluster/multinode.py),
for `citadel up --address` and `citadel ingest --address`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer

from citadel.config import load_config

app = typer.Typer(help="A multi-node Ray cluster on 127.0.0.1 (separate raylets).", no_args_is_help=True)
ConfigOption = typer.Option(None, "--config", help="YAML config file (its home keeps the cluster's state).")


@app.command("up")
def up(nodes: int = typer.Option(3, "--nodes", min=1, max=8, help="Nodes, the head included."),
       cpus: int = typer.Option(1, "--cpus-per-node", min=1, max=64, help="Logical CPUs of each node."),
       object_store_mb: int = typer.Option(100, "--object-store-mb", min=80, help="Object store of each node."),
       head_cpus: Optional[int] = typer.Option(None, "--head-cpus", min=0, max=64, help="Logical CPUs of the head "
                                               "(default: --cpus-per-node); 0 keeps replicas and tasks on workers."),
       config: Optional[Path] = ConfigOption) -> None:
    """Start a head and workers as separate raylets on 127.0.0.1; print the address to pass as --address."""
    from cluster.multinode import ClusterError, cluster_up, state_path

    try:
        state = cluster_up(load_config(config).home, nodes, cpus, object_store_mb, head_cpus)
    except ClusterError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1)
    typer.echo(state.address)
    typer.echo(f"{nodes} nodes ({', '.join(n.resource for n in state.nodes)}); its auth token is in "
               f"{state_path(load_config(config).home)} — `citadel up --address` and `citadel ingest --address` "
               "read it from there", err=True)


@app.command("down")
def down(config: Optional[Path] = ConfigOption) -> None:
    """Stop this home's cluster: only its own processes (never `ray stop`)."""
    from cluster.multinode import cluster_down

    stopped = cluster_down(load_config(config).home)
    typer.echo(f"stopped {stopped} processes" if stopped else "no cluster was running")


@app.command("kill-node")
def kill_node_command(name: str = typer.Argument(..., help="The node: w1, w2, ... (the head is never killed)."),
                      home: Optional[Path] = typer.Option(None, "--home", help="The home whose cluster it is."),
                      config: Optional[Path] = ConfigOption) -> None:
    """Kill one worker node's raylet and its workers at once (SIGKILL), as a crashed machine would go:
    what the node-kill drill does to the local cluster."""
    from cluster.multinode import ClusterError, kill_node

    loaded = load_config(config)
    try:
        killed = kill_node(home.resolve() if home else loaded.home, name)
    except ClusterError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1)
    typer.echo(f"killed {killed} processes of node {name}")


@app.command("status")
def status(config: Optional[Path] = ConfigOption) -> None:
    """The cluster's nodes as Ray sees them."""
    from cluster.multinode import cluster_nodes, read_state

    state = read_state(load_config(config).home)
    if state is None:
        typer.echo("no cluster in this home")
        raise typer.Exit(1)
    print(json.dumps({"address": state.address, "nodes": cluster_nodes(state)}, indent=1))


def use_address(config, address: Optional[str]) -> None:
    """Run on an existing cluster: the config's `ray_address`, and the token of this home's cluster
    when the address is its (an operator's RAY_AUTH_TOKEN wins)."""
    if not address:
        return
    from cluster.multinode import read_state
    from cluster.ray_local import AUTH_MODE_ENV, AUTH_TOKEN_ENV

    config.ingest_pipeline.ray_address = address
    state = read_state(config.home)
    if state is not None and state.address == address and AUTH_TOKEN_ENV not in os.environ:
        os.environ[AUTH_TOKEN_ENV] = state.auth_token
        os.environ[AUTH_MODE_ENV] = "token"
