"""What Ray Serve says about a running app, for the benchmarks and drills that watch or aim at it:
running replicas per deployment, and the rank of a live replica. Kept here because it needs Ray,
which the measurement scripts (benchmarks/) do not import themselves.
"""

from __future__ import annotations

RANK_PROBES = 30
PROBE_TIMEOUT_S = 60.0


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
