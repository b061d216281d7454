"""Run the Serve app on a local, loopback-only Ray instance (DESIGN.md §8): used by `citadel up`,
the integration tests and `citadel bench serve`.

Everything binds to 127.0.0.1; the Ray instance is ours (started by `local_ray`, never `ray stop`),
and leaving the block shuts down Serve and then Ray.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from citadel.config import CitadelConfig
from cluster.ray_local import LOOPBACK, local_ray
from serving.services.metrics import clear_metric_files

APP_NAME = "citadel"
# A deployment's job runner for a block: given the config, yields the serving processes' config.
JobRunnerScope = Callable[[CitadelConfig], AbstractContextManager[CitadelConfig]]
HEALTH_POLL_S = 0.25
log = logging.getLogger(__name__)


class NotHealthy(RuntimeError):
    """The app did not answer /healthz in time."""


def wait_healthy(url: str, timeout_s: float) -> dict:
    """Poll `url`/healthz until it answers 200 or the timeout passes."""
    import json

    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=HEALTH_POLL_S * 8) as response:
                if response.status == 200:
                    return json.loads(response.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            last_error = error
        time.sleep(HEALTH_POLL_S)
    raise NotHealthy(f"{url}/healthz did not answer within {timeout_s:g} s (last error: {last_error})")


def deploy(config: CitadelConfig, health_timeout_s: float = 120.0) -> str:
    """Start Serve's HTTP proxy on loopback and deploy the app (Ray must be connected). Returns the URL."""
    from ray import serve

    from serving.ray.app import build_app_for

    if config.serving.host != LOOPBACK:
        raise ValueError(f"serving.host is {config.serving.host}; this launcher binds only {LOOPBACK}")
    serve.start(http_options={"host": LOOPBACK, "port": config.serving.port}, proxy_location="HeadOnly")
    clear_metric_files(config.metrics_multiprocess_path)  # an earlier app's counts must not add to these
    try:
        serve.run(build_app_for(config), name=APP_NAME, route_prefix="/", blocking=False,
                  logging_config={"enable_access_log": config.serving.access_log})
    except RuntimeError as error:
        raise RuntimeError(f"{error}\n{deployment_problems()}") from None
    url = f"http://{LOOPBACK}:{config.serving.port}"
    wait_healthy(url, health_timeout_s)
    return url


def deployment_problems() -> str:
    """What Serve says about each deployment that is not healthy (replica start errors)."""
    from ray import serve

    lines = []
    for app in serve.status().applications.values():
        for name, deployment in app.deployments.items():
            if deployment.status != "HEALTHY":
                lines.append(f"{name}: {deployment.status}: {deployment.message}")
    return "\n".join(lines)


def replace_app(config: CitadelConfig, health_timeout_s: float = 120.0) -> str:
    """Swap the running app for one built from `config` (another topology) on the same Serve."""
    from ray import serve

    serve.delete(APP_NAME)
    return deploy(config, health_timeout_s)


SERVE_SWITCHES = {"haproxy_ingress": "RAY_SERVE_ENABLE_HA_PROXY", "throughput_optimized": "RAY_SERVE_THROUGHPUT_OPTIMIZED",
                  "direct_ingress": "RAY_SERVE_ENABLE_DIRECT_INGRESS"}
# serving.lean_request_path: user code and the handle router on each replica's own event loop (no
# thread hop per ASGI message or handle call), request-path logs flushed in batches.
LEAN_REQUEST_PATH = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0", "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
                     "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": "1000"}
DIRECT_INGRESS_DRAIN = "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"


def serve_switches(config: CitadelConfig) -> dict[str, str]:
    """The environment Serve reads when its processes start, as `config.serving` asks for it.

    The HAProxy ingress is refused on loopback: Ray 2.60's HAProxy template binds its stats page and
    Prometheus exporter on every interface (`bind *:8404`, `bind :9101`), which DESIGN.md §8 forbids
    here. It is meant for a cluster network (KubeRay), where those ports stay inside the pod. Direct
    ingress without HAProxy binds each replica's port on serving.host, as the proxy's."""
    serving = config.serving
    if serving.haproxy_ingress and serving.host == LOOPBACK:
        raise ValueError("serving.haproxy_ingress binds HAProxy's stats and metrics ports on all interfaces; "
                         "it is refused when serving on 127.0.0.1")
    switches = {variable: "1" for field, variable in SERVE_SWITCHES.items() if getattr(serving, field)}
    if serving.lean_request_path:
        switches.update(LEAN_REQUEST_PATH)
    if serving.direct_ingress or serving.throughput_optimized:  # Serve's throughput mode turns direct ingress on
        switches[DIRECT_INGRESS_DRAIN] = f"{serving.direct_ingress_drain_s:g}"
    return switches


def apply_serve_switches(config: CitadelConfig) -> None:
    """Serve reads these when its controller starts, so they must be set before Ray starts (every
    Ray process inherits this environment); an operator's explicit environment wins."""
    for variable, value in serve_switches(config).items():
        os.environ.setdefault(variable, value)


@contextmanager
def serve_locally(config: CitadelConfig, health_timeout_s: float = 120.0,
                  job_runner: JobRunnerScope | None = None) -> Iterator[str]:
    """A local Ray, Serve and the app for the block; yields the base URL. `job_runner` (`citadel up`,
    given by the CLI: indexing/job_runner.py deployment_job_runner): the deployment's job runner for
    the block, started once Ray is connected; the app gets the config it yields (the serving
    processes' runner threads off) and it stops before Serve does."""
    from ray import serve

    apply_serve_switches(config)
    with local_ray(config.ingest_pipeline):
        try:
            with job_runner(config) if job_runner is not None else nullcontext(config) as serving_config:
                yield deploy(serving_config, health_timeout_s)
        finally:
            serve.shutdown()
