"""Big tenants on retriever deployments of their own (DESIGN.md §5: a tenant of millions of chunks gets
replicas of its own).

In the split topology every tenant's partition is a multiplexed model of the shared `retriever`
deployment. A tenant above `serving.dedicated_tenant_chunks` published chunks (or named in
`serving.dedicated_tenants`) instead gets `retriever-<tenant>`: the same Retriever class with the
`retriever_dedicated` deployment settings, so its replicas and autoscaling are its own and its load
neither evicts nor queues behind the other tenants. The sizes are read from the catalog when the app is
built (`citadel up`, a Serve deploy of `serving.ray.app:build_app`): a tenant that grows past the size
gets its deployment at the next deploy.

The gateway's and the orchestrator's retriever proxy (serving/ray/remote.py RemoteRetriever) call
`handle.options(multiplexed_model_id=tenant)`; `TenantRoutedHandle` answers that with the tenant's own
deployment's handle when it has one, so the proxy, its hedging and its retries are unchanged.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from citadel.config import CitadelConfig
from citadel.types import validate_tenant_id

# The key of the tenants' own retriever handles in the app's handles dict, and their settings' name.
DEDICATED_RETRIEVERS = "dedicated_retrievers"
DEDICATED_SETTINGS = "retriever_dedicated"

log = logging.getLogger(__name__)


def deployment_name(tenant_id: str) -> str:
    return f"retriever-{validate_tenant_id(tenant_id)}"


def published_chunks(config: CitadelConfig) -> dict[str, int]:
    """Published chunks per tenant, from the catalog (an SQLite catalog not created yet: none)."""
    from citadel.wiring import Wiring

    if config.catalog.backend == "sqlite" and not Path(config.catalog_path).exists():
        return {}
    wiring = Wiring(config)
    try:
        return {row["tenant_id"]: int(row["published_chunks"] or 0) for row in wiring.raw_catalog.list_tenants()}
    finally:
        wiring.close()


def dedicated_tenants(config: CitadelConfig,
                      sizes: Callable[[CitadelConfig], dict[str, int]] = published_chunks) -> list[str]:
    """The tenants that get a retriever deployment of their own: those named in config, then the
    biggest above the size, at most `serving.max_dedicated_tenants`. None in the fused topology."""
    serving = config.serving
    if serving.topology != "split" or serving.max_dedicated_tenants == 0:
        return []
    chosen = [validate_tenant_id(t) for t in dict.fromkeys(serving.dedicated_tenants)]
    if serving.dedicated_tenant_chunks > 0:
        by_size = sorted(sizes(config).items(), key=lambda item: (-item[1], item[0]))
        chosen += [t for t, chunks in by_size if chunks > serving.dedicated_tenant_chunks and t not in chosen]
    if len(chosen) > serving.max_dedicated_tenants:
        log.warning("%d tenants qualify for a retriever deployment of their own; the first %d get one (raise "
                    "serving.max_dedicated_tenants for the rest)", len(chosen), serving.max_dedicated_tenants)
    return chosen[: serving.max_dedicated_tenants]


class TenantRoutedHandle:
    """A retriever handle that sends a dedicated tenant's calls to its own deployment: `options(
    multiplexed_model_id=tenant, ...)` returns that deployment's handle (so configured); everything
    else is the shared deployment's."""

    def __init__(self, shared: Any, dedicated: dict[str, Any]):
        self._shared = shared
        self._dedicated = dict(dedicated)

    def options(self, **options: Any) -> Any:
        target = self._dedicated.get(options.get("multiplexed_model_id"), self._shared)
        return target.options(**options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shared, name)


def retriever_handle(handles: dict[str, Any]) -> Any:
    """The retriever handle a proxy calls: routed by tenant when the app has dedicated deployments."""
    dedicated = handles.get(DEDICATED_RETRIEVERS) or {}
    return TenantRoutedHandle(handles["retriever"], dedicated) if dedicated else handles["retriever"]
