"""A local Ray instance bound to 127.0.0.1, started and always stopped by us (DESIGN.md §8).

- Loopback only. Ray 2.60 silently replaces `_node_ip_address="127.0.0.1"` with the machine's
  routable address (measured here: 192.0.2.2) unless its "cluster mode" switch is off; with it off the
  node registers on 127.0.0.1. We turn it off, then check `ray.nodes()` and fail loudly otherwise.
- `RAY_AUTH_MODE` is set deliberately from config (an operator's explicit environment wins).
- No dashboard (~1 GB and 10 processes); workers at a low priority (nice 15 by default).
- Never `ray stop` (it kills every Ray process on the machine): `ray.shutdown()` stops what we started.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from citadel.config import IngestPipelineConfig

LOOPBACK = "127.0.0.1"
# Ray's flag for "multi-node clusters allowed". Off, Ray keeps loopback as the node address.
LOOPBACK_SWITCH_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
AUTH_MODE_ENV = "RAY_AUTH_MODE"
AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
AUTH_TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
TOKEN_BYTES = 32  # 256 bits, as Ray's own generator
WORKER_NICENESS_ENV = "RAY_worker_niceness"
MB = 1024 * 1024

log = logging.getLogger(__name__)


class RayNotLocal(RuntimeError):
    """The Ray node registered on an address other than loopback: refuse to run on it."""


def ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None


@dataclass(frozen=True)
class RayLaunch:
    num_cpus: int
    object_store_bytes: int
    auth_mode: str
    worker_niceness: int

    @classmethod
    def from_config(cls, config: IngestPipelineConfig) -> "RayLaunch":
        return cls(num_cpus=config.ray_num_cpus or os.cpu_count() or 1,
                   object_store_bytes=config.ray_object_store_mb * MB,
                   auth_mode=config.ray_auth_mode, worker_niceness=config.worker_niceness)


def _prepare_environment(launch: RayLaunch) -> None:
    """Environment the raylet and every worker inherit; must be in place before ray.init."""
    os.environ[LOOPBACK_SWITCH_ENV] = "0"
    if AUTH_MODE_ENV in os.environ and os.environ[AUTH_MODE_ENV] != launch.auth_mode:
        log.warning("RAY_AUTH_MODE=%s from the environment overrides the configured %s",
                    os.environ[AUTH_MODE_ENV], launch.auth_mode)
    mode = os.environ.setdefault(AUTH_MODE_ENV, launch.auth_mode)
    if mode == "token" and AUTH_TOKEN_ENV not in os.environ and AUTH_TOKEN_PATH_ENV not in os.environ:
        # A token private to this instance and its child processes: the shared ~/.ray/auth_token can be
        # rewritten by any other Ray user of this account while we run.
        os.environ[AUTH_TOKEN_ENV] = secrets.token_hex(TOKEN_BYTES)
    os.environ[WORKER_NICENESS_ENV] = str(launch.worker_niceness)


def _apply_to_imported_ray() -> None:
    """Ray reads the loopback switch and its auth settings when it is first imported; when that
    happened before `_prepare_environment` (a test importing ray), make this process see them too."""
    from ray._private import ray_constants
    from ray._raylet import AuthenticationTokenLoader, Config

    ray_constants.ENABLE_RAY_CLUSTER = False
    Config.initialize("")  # re-read RAY_* settings (the auth mode) from the environment
    AuthenticationTokenLoader.instance().reset_cache()


def check_loopback(ray_module) -> None:
    """Every live node must be on 127.0.0.1; anything else could be reached from the network."""
    addresses = sorted({node["NodeManagerAddress"] for node in ray_module.nodes() if node.get("Alive")})
    if addresses != [LOOPBACK]:
        raise RayNotLocal(f"Ray nodes registered on {addresses}, not only {LOOPBACK}; refusing to run")


@contextmanager
def local_ray(config: IngestPipelineConfig) -> Iterator[None]:
    """Start a loopback-only local Ray instance for the block and shut it down after.

    If this process is already connected (a test fixture, a caller's instance), reuse it after the
    same loopback check and leave it running: only its owner shuts it down.
    """
    launch = RayLaunch.from_config(config)
    if config.ray_address:
        with existing_ray(config.ray_address):
            yield
        return
    _prepare_environment(launch)
    import ray

    if ray.is_initialized():
        check_loopback(ray)
        yield
        return
    _apply_to_imported_ray()
    ray.init(address="local", _node_ip_address=LOOPBACK, include_dashboard=False, num_cpus=launch.num_cpus,
             object_store_memory=launch.object_store_bytes, log_to_driver=False, logging_level=logging.WARNING)
    try:
        check_loopback(ray)
        yield
    finally:
        ray.shutdown()


@contextmanager
def existing_ray(address: str) -> Iterator[None]:
    """Connect to a running cluster for the block and disconnect after; the cluster keeps running
    (whoever started it stops it). A cluster on loopback must be entirely on loopback; a remote one
    (KubeRay) is the operator's network. Its auth token comes from RAY_AUTH_TOKEN."""
    os.environ[LOOPBACK_SWITCH_ENV] = "0"
    if AUTH_TOKEN_ENV in os.environ:
        os.environ.setdefault(AUTH_MODE_ENV, "token")
    import ray

    if ray.is_initialized():
        yield
        return
    _apply_to_imported_ray()
    ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    try:
        if address.rsplit(":", 1)[0] in (LOOPBACK, "localhost"):
            check_loopback(ray)
        yield
    finally:
        ray.shutdown()
