"""How the pipeline spends the machine: actors, CPUs, threads and input blocks per stage (no Ray)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from citadel.config import IngestPipelineConfig

# Embedding gets whatever logical CPUs the light stages leave, but never less than this per actor.
MIN_EMBED_ACTOR_CPUS = 0.5
# A GPU embed actor still tokenizes on the CPU.
GPU_EMBED_ACTOR_CPUS = 1.0
# Small input blocks keep the stages streaming (a block is parsed, embedded and staged while the next
# is read) and bound the memory of one block's chunk rows.
MAX_DOCUMENTS_PER_BLOCK = 128


@dataclass(frozen=True)
class StagePlan:
    parse_actors: int
    parse_cpus: float
    embed_actors: int
    embed_cpus: float
    embed_gpus: float
    torch_threads: int
    device: str
    write_cpus: float
    input_blocks: int


def plan_stages(config: IngestPipelineConfig, ray_cpus: float, machine_cpus: int, documents: int,
                node_cpus: float | None = None) -> StagePlan:
    """Size every stage so all of them fit in the instance at once (no stage starves another).
    `node_cpus`: the CPUs of the cluster's largest node — an actor runs on one node, so one asking for
    more would never be placed (on a cluster of small nodes the embed share is capped there)."""
    on_gpu = config.embed_num_gpus > 0
    light = config.parse_actors * config.parse_cpus + config.write_cpus
    if on_gpu:
        embed_cpus = GPU_EMBED_ACTOR_CPUS
    else:
        embed_cpus = max(MIN_EMBED_ACTOR_CPUS, (ray_cpus - light) / config.embed_actors)
        if node_cpus is not None:
            embed_cpus = max(MIN_EMBED_ACTOR_CPUS, min(embed_cpus, node_cpus - config.parse_cpus))
    needed = light + embed_cpus * config.embed_actors
    if needed > ray_cpus + 1e-9:
        raise ValueError(f"the stages need {needed:g} CPUs but the Ray instance has {ray_cpus:g}: "
                         "lower ingest_pipeline.embed_actors or raise ray_num_cpus")
    # torch threads are physical: split the machine's cores among the actors sharing it.
    threads = config.embed_torch_threads or max(1, machine_cpus // config.embed_actors)
    actors = max(config.parse_actors, config.embed_actors)
    blocks = max(config.blocks_per_actor * actors, math.ceil(documents / MAX_DOCUMENTS_PER_BLOCK))
    return StagePlan(
        parse_actors=config.parse_actors,
        parse_cpus=config.parse_cpus,
        embed_actors=config.embed_actors,
        embed_cpus=round(embed_cpus, 3),
        embed_gpus=config.embed_num_gpus,
        torch_threads=threads,
        device="cuda" if on_gpu else "cpu",
        write_cpus=config.write_cpus,
        input_blocks=max(1, min(documents, blocks)),
    )
