"""Composes a Gateway from config, with its stages in this process or behind other deployments.

`local_stages` builds the fused topology's stages (and each split deployment's own stage);
`build_gateway` wires identity, state and the stages into the Gateway. Neither imports Ray: the split
topology passes proxies (serving/remote.py) that implement the same interfaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from citadel.answer.service import QueryVectorMemo, build_answer_service
from citadel.catalog.sqlite import SQLiteCatalog
from citadel.config import CitadelConfig
from citadel.guardrails import Router
from citadel.guardrails.planted import passage_has_planted_instructions
from citadel.identity import Authenticator
from citadel.retrieval.partitions import PartitionCache
from citadel.state import make_state
from serving.gateway import Gateway
from serving.metrics import ApiMetrics


@dataclass
class Stages:
    """What the gateway calls. Any field left None is built locally from config."""

    embedder: Any = None      # Embedder: queries for retrieval (local) and passages for uploads
    retriever: Any = None     # .retrieve(principal, query, top_k=, request_id=) -> RetrievalResult
    reranker: Any = None      # Reranker
    generator: Any = None     # Generator
    router: Any = None        # .route(question) -> decision
    memo: QueryVectorMemo | None = None  # query vectors the (remote) retriever computed, for the gate


def make_embedder(config: CitadelConfig, stage: str | None = None):
    """The embedder of a serving replica. Ray sets OMP_NUM_THREADS=1 in a replica with a fractional
    CPU, which left torch on one thread (single-query latency 1.6x the in-process figure here): use
    the configured thread count, else the machine's cores. A stage given a GPU share runs on CUDA in fp16."""
    import os

    from citadel.embedding.factory import make_embedder as factory

    settings = config.serving.deployments.get(stage or config.serving.topology)
    on_gpu = settings is not None and settings.num_gpus > 0
    threads = config.embedding.torch_threads or os.cpu_count() or 1
    return factory(config.embedding, device="cuda" if on_gpu else "cpu", fp16=on_gpu, torch_threads=threads)


def build_gateway(config: CitadelConfig, stages: Stages | None = None, clock: Callable[[], float] | None = None,
                  catalog: SQLiteCatalog | None = None) -> Gateway:
    stages = stages or Stages()
    catalog = catalog or SQLiteCatalog(config.catalog_path)
    partitions = PartitionCache(catalog, config.partitions_dir, capacity=config.serving.tenants_per_replica)
    embedder = stages.embedder if stages.embedder is not None else make_embedder(config, "fused")
    answers = build_answer_service(config, catalog, partitions, embedder, router=stages.router or Router(),
                                   passage_filter=passage_has_planted_instructions, retriever=stages.retriever,
                                   reranker=stages.reranker, generator=stages.generator, memo=stages.memo)
    authenticator = Authenticator.from_config(config) if clock is None else Authenticator.from_config(config, clock)
    state = make_state(config.state) if clock is None else make_state(config.state, clock)

    def ingestor():
        from citadel.ingestion import Ingestor

        return Ingestor(catalog, embedder, config)

    return Gateway(config, catalog, authenticator, state, answers, answers.retriever, ingestor, ApiMetrics())
