"""The drills' control plane over HTTP: faults set and cleared through the admin API
(`PUT/DELETE /v1/admin/faults/{stage}`, a platform admin's bearer token) and metric samples read
from `/metrics` (a metrics credential's bearer token)."""

from __future__ import annotations

import re

import httpx

from loadtests.client import HTTP_TIMEOUT_S


def _bearer(token: str) -> dict:
    return {"authorization": f"Bearer {token}"}


def set_fault(url: str, admin_token: str, stage: str, **spec) -> None:
    """Inject a fault into `stage` (e.g. latency_ms=..., error_rate=..., replicas=[rank])."""
    httpx.put(f"{url}/v1/admin/faults/{stage}", json=spec, headers=_bearer(admin_token),
              timeout=HTTP_TIMEOUT_S).raise_for_status()


def deployed_stages(url: str, admin_token: str) -> set[str] | None:
    """The stages the deployment can take a fault on (GET /v1/admin/faults); None when it does not say."""
    response = httpx.get(f"{url}/v1/admin/faults", headers=_bearer(admin_token), timeout=HTTP_TIMEOUT_S)
    response.raise_for_status()
    stages = response.json().get("stages")
    return set(stages) if isinstance(stages, list) else None


def clear_fault(url: str, admin_token: str, stage: str) -> None:
    httpx.delete(f"{url}/v1/admin/faults/{stage}", headers=_bearer(admin_token),
                 timeout=HTTP_TIMEOUT_S).raise_for_status()


def metric_value(url: str, metrics_token: str, name: str, labels: str = "") -> float:
    """The sum of the samples of `name` with exactly `labels` (e.g. '{breaker="generator"}') in the
    gateway's /metrics; 0 when absent."""
    response = httpx.get(f"{url}/metrics", headers=_bearer(metrics_token), timeout=HTTP_TIMEOUT_S)
    response.raise_for_status()  # a refused credential must not read as "every counter is 0"
    pattern = re.compile(rf"^{re.escape(name)}{re.escape(labels)}\s+([0-9.eE+-]+)$", re.M)
    return sum(float(m.group(1)) for m in pattern.finditer(response.text))
