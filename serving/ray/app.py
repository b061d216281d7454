"""The Ray Serve application (DESIGN.md §5): `build_app(args) -> Application`, the Serve config's
`import_path` (`serving.ray.app:build_app`).

Two topologies from one config (`serving.topology`):
- **fused**: one deployment, the HTTP ingress with every stage in its replica (no hops; CPU-only and
  latency-critical use). Agentic runs are driven in the same replica.
- **split**: a gateway ingress calling embedder, retriever and generator (and reranker, when one
  is configured) deployments, each with its own replicas, autoscaling and resources, plus an
  **orchestrator** deployment that drives agentic runs (`Orchestrator.drive`) over those same stage
  deployments. The gateway's RunsService starts a run by calling it (serving/ray/remote.py
  `RemoteOrchestrator`) and, every `agent.lease_ttl_s`, adopts the unfinished runs whose lease
  expired: when an orchestrator replica dies mid-run the gateway's call fails, the run's lease
  expires, and the adopter starts it again on a live replica, which continues from the last recorded
  step (runs live in the shared run store: SQLite under the home, or Redis). Each orchestrator replica
  drives under an owner id of its own (the gateway's plus the replica's id), so a restarted replica
  can never renew a dead one's lease.
The question router (rules and a small TF-IDF classifier, microseconds of work) runs in the gateway
and the orchestrator in both: as a deployment of its own it cost a Serve hop (~5-8 ms here) per answer.
The stage objects are the same plain classes in both (serving/services/compose.py); this module only puts Ray
decorators around them. Each deployment's limits and autoscaling come from
`serving.deployments.<name>` in config.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from ray import serve
from ray.serve import Application

from citadel.answer.service import QueryVectorMemo
from citadel.config import CitadelConfig, DeploymentSettings, load_config
from citadel.resilience.deadline import deadline_scope
from citadel.resilience.process import Resilience, process_resilience
from citadel.wiring import Stages, Wiring
from serving.http.api import create_api
from serving.ray.dedicated import (DEDICATED_RETRIEVERS, DEDICATED_SETTINGS, dedicated_tenants, deployment_name,
                                   retriever_handle)
from serving.ray.loopback import pin_replica_grpc_to_loopback
from serving.ray.remote import (RemoteEmbedder, RemoteGenerator, RemoteOrchestrator, RemoteReranker, RemoteRetriever,
                                adopted_deadline, bind_handles)
from serving.services.compose import build_services
from serving.services.metrics import MULTIPROCESS_ENV


def _config(config_dict: dict) -> CitadelConfig:
    """Every replica's first step: its config, and its sockets pinned to loopback (serving/ray/loopback.py)."""
    config = CitadelConfig.model_validate(config_dict)
    pin_replica_grpc_to_loopback(config)
    return config


def replica_rank() -> int:
    """This Serve replica's rank (0..n-1), so a drill can slow or kill one replica of several."""
    try:
        rank = serve.get_replica_context().rank
        return int(getattr(rank, "rank", rank) or 0)
    except Exception:  # not in a replica (tests, fused in-process use)
        return 0


def replica_id() -> str:
    """This Serve replica's unique id (a restarted replica gets a new one); a random one outside Serve."""
    try:
        return str(serve.get_replica_context().replica_id.unique_id)
    except Exception:  # not in a replica
        return uuid.uuid4().hex[:12]


def _within(epoch: float | None, call):
    """`call`, run inside the caller's deadline (handed over as epoch seconds)."""
    def bounded(*args):
        with deadline_scope(adopted_deadline(epoch)):
            return call(*args)

    return bounded


# ---------------------------------------------------------------------- stage deployments
@serve.deployment
class Embedder:
    """Query embeddings, batched across concurrent requests (one model forward per batch)."""

    def __init__(self, config_dict: dict):
        config = _config(config_dict)
        self._embedder = Wiring(config, in_replica=True, stage="embedder").local_embedder
        self._faults = process_resilience(config, replica_rank).injector("embedder")  # drills only
        self.embed_query = serve.batch(max_batch_size=config.serving.embed_max_batch_size,
                                       batch_wait_timeout_s=config.serving.embed_batch_wait_s)(self._embed_batch)

    async def _embed_batch(self, texts: list[str]) -> list[np.ndarray]:
        vectors = await asyncio.to_thread(self._embed, list(texts))
        return list(vectors)

    def _embed(self, texts: list[str]) -> np.ndarray:
        self._faults.before()  # a drill's latency, errors or hang for this replica
        return self._embedder.embed_queries(texts)

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self._embedder.embed_passages, texts)

    def info(self) -> dict:
        return {"model_id": self._embedder.model_id, "dim": self._embedder.dim}


class TenantSlot:
    """A tenant's partition held by one retriever replica while Serve's multiplexing LRU keeps it.
    Serve calls `__del__` when it evicts the tenant; eviction is idempotent, so running the cleanup
    twice (Serve, then the garbage collector) is harmless."""

    def __init__(self, partitions, tenant_id: str):
        self._partitions = partitions
        self.tenant_id = tenant_id
        partitions.get(tenant_id)  # load now, so the first query does not pay for it

    def __del__(self) -> None:
        self._partitions.evict(self.tenant_id)


@serve.deployment
class Retriever:
    """ACL-scoped hybrid retrieval; tenants are multiplexed models (one partition each)."""

    def __init__(self, config_dict: dict, embedder_handle):
        config = _config(config_dict)
        # The core retriever behind this replica's guard, over the embedder deployment (guarded,
        # faults injected there) and a memo that hands the query vector back to the gateway.
        resilience = process_resilience(config, replica_rank)
        bind_handles(embedder_handle, resilience)
        wiring = Wiring(config, resilience=resilience,
                        stages=Stages(embedder=RemoteEmbedder(embedder_handle, config.serving.request_timeout_s)))
        self._memo = wiring.memo
        self._retriever = wiring.retriever
        partitions = self._partitions = wiring.partitions

        async def load(tenant_id: str) -> TenantSlot:
            return await asyncio.to_thread(TenantSlot, partitions, tenant_id)

        # Wired at init so the LRU size comes from config (Serve detects an instance attribute);
        # a plain function, since Serve keeps its per-replica model table on the decorated object.
        self.tenant = serve.multiplexed(max_num_models_per_replica=config.serving.tenants_per_replica)(load)

    async def retrieve(self, principal, query: str, top_k: int | None, request_id: str | None,
                       deadline_epoch: float | None = None):
        if serve.get_multiplexed_model_id() != principal.tenant_id:
            raise ValueError("retriever call not routed by the caller's tenant")
        await self.tenant(principal.tenant_id)
        result = await asyncio.to_thread(self._retrieve, principal, query, top_k, request_id, deadline_epoch)
        return result, self._memo.recall(query)

    def rank(self) -> int:
        """This replica's rank, so a drill can aim a fault at one live replica."""
        return replica_rank()

    def tenants(self) -> list[str]:
        """The tenants whose partitions this replica holds now (which deployment serves whom)."""
        return self._partitions.tenants()

    def tiers(self) -> dict[str, str]:
        """The tier of each partition this replica holds now (a tier move reaches it at the next query)."""
        return self._partitions.tiers()

    def _retrieve(self, principal, query: str, top_k: int | None, request_id: str | None,
                  deadline_epoch: float | None):
        with deadline_scope(adopted_deadline(deadline_epoch)):  # the gateway's deadline bounds our hops too
            return self._retriever.retrieve(principal, query, top_k, request_id)


@serve.deployment
class Reranker:
    def __init__(self, config_dict: dict):
        from citadel.rerank.backends import make_reranker

        config = _config(config_dict)
        self._reranker = make_reranker(config.answer)  # unguarded: the gateway's breaker times this hop
        self._guard = process_resilience(config, replica_rank).faults_only("reranker")

    def model_id(self) -> str:
        return self._reranker.model_id

    async def rerank(self, question: str, passages: list, top_n: int, deadline_epoch: float | None = None) -> list:
        return await asyncio.to_thread(_within(deadline_epoch, self._guard.call), self._reranker.rerank, question,
                                       passages, top_n)


@serve.deployment
class Generator:
    def __init__(self, config_dict: dict):
        from citadel.answer.generators import make_generator

        config = _config(config_dict)
        self._generator = make_generator(config.answer)
        # Faults only: the breaker on this hop lives in the gateway, which times what it waits for.
        self._guard = process_resilience(config, replica_rank).faults_only("generator")

    def model_id(self) -> str:
        return self._generator.model_id

    async def generate(self, question: str, sources: list, prompt=None, deadline_epoch: float | None = None) -> str:
        return await asyncio.to_thread(_within(deadline_epoch, self._guard.call), self._generator.generate, question,
                                       sources, prompt)


@serve.deployment
class Orchestrator:
    """Agentic runs (split topology): `drive(run_id, owner)` works a run to its end under its lease,
    with this replica's own Wiring over the stage deployments (the same remote stages as the
    gateway's). The run store is shared, so any replica continues a run from its last recorded step.

    A run holds one thread here for its whole life (it mostly waits on the stages), so drives get a
    pool as large as the replica's `max_ongoing_requests` rather than the event loop's default one."""

    def __init__(self, config_dict: dict, handles: dict[str, Any]):
        config = _config(config_dict)
        resilience = process_resilience(config, replica_rank)
        wiring = Wiring(config, resilience=resilience, stages=_remote_stages(config, handles, resilience),
                        in_replica=True, stage="orchestrator")
        self._orchestrator = wiring.make_orchestrator(wiring.run_store)
        self._replica = replica_id()
        threads = config.serving.deployments["orchestrator"].max_ongoing_requests
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="drive")

    async def drive(self, run_id: str, owner: str):
        """The run as it stands after this drive (a `Run`). `owner` (the caller's) is suffixed with
        this replica's id: a replica started after this one died never holds this one's lease."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._orchestrator.drive, run_id, f"{owner}/{self._replica}")


# ---------------------------------------------------------------------- the ingress
@serve.deployment
@serve.ingress()
class Gateway:
    """HTTP ingress. Without handles it runs every stage itself (fused); with them it calls the
    stage deployments (split). Its app is built in the replica, after the services, and holds them
    (`__serve_build_asgi_app__`: Serve calls it once the constructor returned)."""

    def __init__(self, config_dict: dict, handles: dict[str, Any] | None = None):
        config = _config(config_dict)
        resilience = process_resilience(config, replica_rank)
        stages = _remote_stages(config, handles, resilience) if handles else None
        self.services = build_services(config, stages, resilience=resilience, in_replica=True)

    def __serve_build_asgi_app__(self):
        return create_api(self.services)

    def __del__(self):
        """Serve's replica shutdown: this process's per-process gauges leave the node's metrics."""
        services = getattr(self, "services", None)  # a constructor that failed built none
        if services is not None:
            services.metrics.process_ended()


def _remote_stages(config: CitadelConfig, handles: dict[str, Any], resilience: Resilience) -> Stages:
    """Proxies to the stage deployments in `handles`; with an "orchestrator" handle (the gateway's),
    runs are driven there. A run's call waits for the whole run: its deadline, then one request
    timeout for the answer's synthesis."""
    timeout_s = config.serving.request_timeout_s
    retrievers = {name: handles[name] for name in ("retriever", DEDICATED_RETRIEVERS) if name in handles}
    bind_handles(retrievers, resilience, awaited=True)  # hedged reads await them on the resilience loop
    bind_handles({name: h for name, h in handles.items() if name not in retrievers}, resilience)
    memo = QueryVectorMemo(RemoteEmbedder(handles["embedder"], timeout_s))
    reranker = handles.get("reranker")
    orchestrator = handles.get("orchestrator")
    return Stages(embedder=RemoteEmbedder(handles["embedder"], timeout_s),
                  retriever=RemoteRetriever(retriever_handle(handles), timeout_s, memo, resilience),
                  reranker=RemoteReranker(reranker, timeout_s) if reranker is not None else None,
                  generator=RemoteGenerator(handles["generator"], timeout_s),
                  memo=memo,
                  orchestrator=(RemoteOrchestrator(orchestrator, config.agent.deadline_s + timeout_s)
                                if orchestrator is not None else None))


# ---------------------------------------------------------------------- the builder
def deployment_options(name: str, settings: DeploymentSettings) -> dict[str, Any]:
    """Serve options of one deployment from its config entry (fixed replicas when min == max)."""
    options: dict[str, Any] = {
        "name": name,
        "max_ongoing_requests": settings.max_ongoing_requests,
        "max_queued_requests": settings.max_queued_requests,
        "ray_actor_options": {"num_cpus": settings.num_cpus, "num_gpus": settings.num_gpus,
                              **({"resources": dict(settings.resources)} if settings.resources else {})},
    }
    if settings.max_replicas_per_node is not None:
        options["max_replicas_per_node"] = settings.max_replicas_per_node
    if settings.health_check_period_s is not None:
        options["health_check_period_s"] = settings.health_check_period_s
    if settings.max_replicas > settings.min_replicas:
        options["autoscaling_config"] = {
            "min_replicas": settings.min_replicas, "max_replicas": settings.max_replicas,
            "initial_replicas": max(settings.min_replicas, 1),
            "target_ongoing_requests": settings.target_ongoing_requests,
            "upscale_delay_s": settings.upscale_delay_s, "downscale_delay_s": settings.downscale_delay_s,
        }
    else:
        options["num_replicas"] = settings.min_replicas or 1
    return options


def app_config(args: dict[str, Any] | None) -> CitadelConfig:
    """The config the app runs with: `args.config` (a YAML path) or CITADEL_CONFIG, then
    `args.topology`; the home directory made absolute, since replicas do not share our cwd."""
    args = dict(args or {})
    config = load_config(args.get("config"))
    if args.get("topology"):
        config.serving.topology = args["topology"]
    config.home = Path(config.home).resolve()
    return config


def build_app(args: dict[str, Any] | None = None) -> Application:
    """The Serve config's entry point: `args` are its `args` (`config`, `topology`)."""
    return build_app_for(app_config(args))


def build_app_for(config: CitadelConfig) -> Application:
    config = config.model_copy(deep=True)
    config.home = Path(config.home).resolve()
    config_dict = config.model_dump(mode="json")
    settings = config.serving.deployments

    def bound(deployment, name: str, *bind_args, settings_name: str | None = None):
        options = deployment_options(name, settings[settings_name or name])
        if deployment is Retriever and config.resilience.outlier_routing:
            from serving.ray.routing import ROUTER_CLASS

            options["request_router_config"] = {"request_router_class": ROUTER_CLASS}
        return deployment.options(**options).bind(config_dict, *bind_args)

    def gateway(name: str, *bind_args):
        """The ingress, its replicas writing their metrics to the node's directory (ApiMetrics.from_config)."""
        options = deployment_options(name, settings[name])
        metrics_dir = config.metrics_multiprocess_path
        if metrics_dir is not None:
            options["ray_actor_options"]["runtime_env"] = {"env_vars": {MULTIPROCESS_ENV: str(metrics_dir)}}
        return Gateway.options(**options).bind(config_dict, *bind_args)

    if config.serving.topology == "fused":
        return gateway("fused")
    embedder = bound(Embedder, "embedder")
    handles = {"embedder": embedder, "retriever": bound(Retriever, "retriever", embedder),
               "generator": bound(Generator, "generator")}
    if config.answer.reranker != "none":
        handles["reranker"] = bound(Reranker, "reranker")
    # Big tenants' own retriever deployments; the proxies route their calls there (serving/ray/dedicated.py).
    handles[DEDICATED_RETRIEVERS] = {tenant: bound(Retriever, deployment_name(tenant), embedder,
                                                   settings_name=DEDICATED_SETTINGS)
                                     for tenant in dedicated_tenants(config)}
    # The orchestrator calls the stages, never itself; the gateway calls it too.
    handles["orchestrator"] = bound(Orchestrator, "orchestrator", dict(handles))
    return gateway("gateway", handles)
