"""Composes a Gateway from config, with its stages in this process or behind other deployments.

`build_gateway` wires identity, state, the stages and their resilience guards into the Gateway; the
split topology passes proxies (serving/remote.py) that implement the same interfaces as the local
stages. Guards run here, on the caller's side of each hop (a breaker times what the caller waits for);
faults are injected where the stage runs (here for local stages, in the stage's replica otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from citadel.answer.service import QueryVectorMemo, build_answer_service
from citadel.catalog.sqlite import SQLiteCatalog
from citadel.config import CitadelConfig
from citadel.guardrails import Router
from citadel.guardrails.planted import PlantedScreen
from citadel.identity.authenticator import Authenticator
from citadel.rerank.backends import NoRerank, make_reranker
from citadel.resilience.guards import (GuardedCatalog, GuardedEmbedder, GuardedReranker, ResilientGenerator)
from citadel.retrieval.partitions import PartitionCache
from citadel.state import make_state
from serving.gateway import Gateway
from serving.metrics import ApiMetrics
from serving.resilience import Resilience


@dataclass
class Stages:
    """What the gateway calls. Any field left None is built locally from config."""

    embedder: Any = None      # Embedder: queries for retrieval (local) and passages for uploads
    retriever: Any = None     # .retrieve(principal, query, top_k=, request_id=) -> RetrievalResult
    reranker: Any = None      # Reranker
    generator: Any = None     # Generator
    router: Any = None        # .route(question) -> decision
    memo: QueryVectorMemo | None = None  # query vectors the (remote) retriever computed, for the gate


def make_embedder(config: CitadelConfig, stage: str | None = None, in_replica: bool = False):
    """The embedder of a serving process. torch threads: the configured count, else the machine's
    cores shared among the stage's replicas (Ray would leave a fractional-CPU replica on one thread;
    replicas each taking every core oversubscribe the machine). A stage with a GPU share runs on CUDA
    in fp16."""
    import os

    from citadel.embedding.factory import make_embedder as factory

    settings = config.serving.deployments.get(stage or config.serving.topology)
    on_gpu = settings is not None and settings.num_gpus > 0
    replicas = settings.max_replicas if (in_replica and settings is not None) else 1
    threads = config.embedding.torch_threads or max(1, (os.cpu_count() or 1) // replicas)
    return factory(config.embedding, device="cuda" if on_gpu else "cpu", fp16=on_gpu, torch_threads=threads)


def make_generators(config: CitadelConfig):
    """(primary, secondary or None) generators from config."""
    from citadel.answer.generators import make_generator

    secondary = None
    if config.answer.secondary_generator is not None:
        secondary = make_generator(config.answer.model_copy(update={"generator": config.answer.secondary_generator}))
    return make_generator(config.answer), secondary


def guarded_catalog(config: CitadelConfig, resilience: Resilience, catalog: SQLiteCatalog | None = None):
    """The catalog with its query-path reads behind the catalog breaker: they fail closed."""
    return GuardedCatalog(catalog or SQLiteCatalog(config.catalog_path), resilience.guard("catalog"))


def build_gateway(config: CitadelConfig, stages: Stages | None = None, clock: Callable[[], float] | None = None,
                  catalog: SQLiteCatalog | None = None, resilience: Resilience | None = None,
                  in_replica: bool = False) -> Gateway:
    from citadel.retrieval.retriever import Retriever

    stages = stages or Stages()
    metrics = ApiMetrics.from_config(config.serving)
    resilience = resilience or Resilience(config)
    resilience.add_listener(metrics.breaker_transition)
    catalog = guarded_catalog(config, resilience, catalog)
    partitions = PartitionCache(catalog, config.partitions_dir, capacity=config.serving.tenants_per_replica)
    local_embedder = stages.embedder is None
    embedder = GuardedEmbedder(make_embedder(config, "fused", in_replica) if local_embedder else stages.embedder,
                               resilience.guard("embedder", inject=local_embedder))
    memo = stages.memo or QueryVectorMemo(embedder)
    retriever = stages.retriever or FaultyRetriever(
        Retriever(catalog, partitions, memo, config.retrieval, config.index), resilience.guard("retriever"))
    answers = build_answer_service(config, catalog, partitions, embedder, router=stages.router or Router(),
                                   passage_filter=PlantedScreen(config.answer.screen_cache_chunks), retriever=retriever,
                                   reranker=_reranker(config, stages, resilience),
                                   generator=_generator(config, stages, resilience), memo=memo)
    authenticator = Authenticator.from_config(config) if clock is None else Authenticator.from_config(config, clock)
    state = make_state(config.state) if clock is None else make_state(config.state, clock)

    def ingestor():
        from citadel.ingestion import Ingestor

        return Ingestor(catalog, embedder, config)

    gateway = Gateway(config, catalog, authenticator, state, answers, retriever, ingestor, metrics,
                      cache_guard=resilience.guard("cache"))
    metrics.watch_retriever(retriever)
    gateway.resilience = resilience
    if in_replica and config.answer.answer_log_purge_interval_s > 0:  # retention without traffic too
        from citadel.catalog.retention import AnswerLogPurger

        AnswerLogPurger(catalog, config.answer, config.answer.answer_log_purge_interval_s).start()
    return gateway


def _reranker(config: CitadelConfig, stages: Stages, resilience: Resilience):
    if stages.reranker is None:
        local = make_reranker(config.answer)
        # "none" stays NoRerank: the answer service reports it as skipped without calling it
        return local if isinstance(local, NoRerank) else GuardedReranker(local, resilience.guard("reranker"))
    return GuardedReranker(stages.reranker, resilience.guard("reranker", inject=False))


def _generator(config: CitadelConfig, stages: Stages, resilience: Resilience) -> ResilientGenerator:
    local = stages.generator is None
    primary, secondary = make_generators(config)
    if not local:
        primary = stages.generator
    secondary_guard = resilience.guard("generator", breaker="generator_secondary", inject=False)
    return ResilientGenerator(primary, resilience.guard("generator", inject=local), secondary, secondary_guard)


class FaultyRetriever:
    """The in-process retriever with the drill's fault injector in front (fused topology)."""

    def __init__(self, inner, guard):
        self._inner = inner
        self._guard = guard

    def retrieve(self, principal, query: str, top_k: int | None = None, request_id: str | None = None):
        return self._guard.call(self._inner.retrieve, principal, query, top_k, request_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
