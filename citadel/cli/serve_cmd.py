"""`citadel up` / `citadel down`: the local cluster (serving/ray/launcher.py does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from citadel.config import load_config


def up(
    config: Optional[Path] = typer.Option(None, "--config", help="Citadel config YAML (e.g. cluster/local.yaml)."),
    topology: Optional[str] = typer.Option(None, "--topology", help="fused or split (default: from config)."),
    timeout: float = typer.Option(180.0, "--timeout", help="Seconds to wait for /healthz."),
    address: Optional[str] = typer.Option(None, "--address", help="Run on an existing Ray cluster (host:port of "
                                           "its GCS: `citadel cluster up`'s, or a KubeRay head) instead of "
                                           "starting one."),
) -> None:
    """Start a local Ray instance on 127.0.0.1 (dashboard off) and the API; print its URL."""
    from serving.ray.launcher import LOCAL_ADMIN_SERVICE, LOCAL_APP_SERVICE, LauncherError, direct_urls, token_path
    from serving.ray.launcher import up as start

    from citadel.cli.cluster_cmd import use_address

    loaded = load_config(config)
    use_address(loaded, address)
    if topology is not None:
        if topology not in ("fused", "split"):
            raise typer.BadParameter("--topology must be fused or split")
        loaded.serving.topology = topology
    try:
        # The supervisor with the deployment's job runner actor (the gateways' runner threads off).
        url = start(loaded, timeout_s=timeout, supervisor="citadel.cli.supervisor")
    except LauncherError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1)
    typer.echo(url)
    if replicas := direct_urls(loaded):
        typer.echo(f"each ingress replica also answers at its own URL (no proxy hop): {' '.join(replicas)}", err=True)
    typer.echo(f"topology {loaded.serving.topology}; service token in {token_path(loaded, LOCAL_APP_SERVICE)}, "
               f"admin token in {token_path(loaded, LOCAL_ADMIN_SERVICE)}; "
               f"mint a user context with `citadel token --service {LOCAL_APP_SERVICE} ...`", err=True)


def down(config: Optional[Path] = typer.Option(None, "--config", help="The config `up` was given.")) -> None:
    """Stop the local cluster that `citadel up` started (only that one)."""
    from serving.ray.launcher import down as stop

    typer.echo("stopped" if stop(load_config(config)) else "no local cluster was running")
