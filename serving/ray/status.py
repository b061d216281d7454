"""What Ray Serve says about a running app, for the benchmarks and drills that watch or aim at it:
running replicas per deployment, the rank of a live replica, and the URLs of replicas that answer
HTTP themselves. Kept here because it needs Ray, which the measurement scripts (benchmarks/) do not
import themselves.
"""

from __future__ import annotations

RANK_PROBES = 30
PROBE_TIMEOUT_S = 60.0
REPLICA_TARGET = "SERVE_REPLICA::"  # the proxy's own entry in a target group is named otherwise
WILDCARD_HOSTS = ("0.0.0.0", "::")


def replica_counts(app_name: str) -> dict[str, int]:
    """RUNNING replicas per deployment of `app_name` (empty when the app is not deployed)."""
    from ray import serve

    app = serve.status().applications.get(app_name)
    if app is None:
        return {}
    return {name: sum(n for state, n in deployment.replica_states.items() if state == "RUNNING")
            for name, deployment in app.deployments.items()}


def lowest_replica_rank(deployment: str, app_name: str, probes: int = RANK_PROBES,
                        timeout_s: float = PROBE_TIMEOUT_S) -> int:
    """The lowest rank among the live replicas of `deployment` (it must expose `rank()`): asked
    `probes` times through a handle, since each call reaches whichever replica the router picks."""
    from ray import serve

    handle = serve.get_deployment_handle(deployment, app_name=app_name)
    return min({handle.rank.remote().result(timeout_s=timeout_s) for _ in range(probes)})


def direct_ingress_urls(app_name: str, host: str, timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
    """The base URLs at which `app_name`'s ingress replicas answer HTTP themselves (serving.direct_ingress),
    once every running ingress replica has its port; empty when direct ingress is off. `host` is the
    address they bind (serving.host); a wildcard bind is reached at the node's address."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        group = _http_target_group(app_name)
        if group is None:
            return []
        targets = [t for t in group["targets"] if t["name"].startswith(REPLICA_TARGET)]
        running = replica_counts(app_name).get(group["ingress_deployment_name"], 0)
        if (running and len(targets) >= running) or time.monotonic() > deadline:
            return sorted(f"http://{host if host not in WILDCARD_HOSTS else t['ip']}:{t['port']}" for t in targets)
        time.sleep(0.1)


def _http_target_group(app_name: str) -> dict | None:
    """Serve's HTTP target group for the app: its replicas' own ports under direct ingress. Only the
    instance details carry target groups (the dashboard's REST API serves the same; it is off here)."""
    from ray.serve.context import _get_global_client

    for group in _get_global_client().get_serve_details().get("target_groups") or []:
        if group.get("app_name") == app_name and str(group.get("protocol")).upper().endswith("HTTP"):
            return group
    return None
