"""Pure sizing functions: RAM and SSD per tier, GPUs, replicas, tokens, cost, and what runs out first.

Everything here is arithmetic on a `Workload`; nothing measures or simulates. `build_plan` assembles
the JSON that `citadel capacity plan --json` prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from capacity.errorbudget import error_budget_report
from capacity.retrystorm import storm_loads
from capacity.workload import (
    BYTES_PER_DTYPE,
    DiskannSpec,
    ExactSpec,
    HnswSpec,
    TieringSpec,
    Workload,
)

SECONDS_PER_DAY = 86_400.0
SECONDS_PER_HOUR = 3_600.0
MINUTES_PER_DAY = 1_440.0
DAYS_PER_MONTH = 30.0
TOKENS_PER_MILLION = 1e6
BYTES_PER_GB = 1e9
# Upper bound for the "how far can load grow" search; beyond 1000x a plan is a different plan.
MAX_LOAD_MULTIPLIER = 1_000.0
# DiskANN stores, per node, its vector, a neighbour count and the neighbour ids.
DISKANN_DEGREE_FIELD_BYTES = 4


# ---------------------------------------------------------------- tenants and tiers


def tenant_sizes(total_chunks: int, tenants: int, zipf_exponent: float) -> np.ndarray:
    """Chunks per tenant, largest first: size(rank) ~ rank**-s, scaled to sum to `total_chunks`."""
    ranks = np.arange(1, tenants + 1, dtype=np.float64)
    weights = ranks**-zipf_exponent
    return total_chunks * weights / weights.sum()


@dataclass(frozen=True)
class TierSplit:
    """Chunks and tenants per tier (exact = tiny tenants, hnsw = hot, diskann = cold)."""

    exact_chunks: float
    hnsw_chunks: float
    diskann_chunks: float
    exact_tenants: int
    hnsw_tenants: int
    diskann_tenants: int

    def as_dict(self) -> dict:
        return {
            "exact": {"tenants": self.exact_tenants, "chunks": self.exact_chunks},
            "hnsw": {"tenants": self.hnsw_tenants, "chunks": self.hnsw_chunks},
            "diskann": {"tenants": self.diskann_tenants, "chunks": self.diskann_chunks},
        }


def split_tiers(sizes: np.ndarray, tiering: TieringSpec) -> TierSplit:
    """Assign each tenant a tier by size, as citadel's IndexConfig does."""
    tiny = sizes <= tiering.tiny_max_chunks
    hot_cap = math.inf if tiering.hot_max_chunks is None else tiering.hot_max_chunks
    hot = ~tiny & (sizes <= hot_cap)
    cold = ~tiny & ~hot
    return TierSplit(
        exact_chunks=float(sizes[tiny].sum()),
        hnsw_chunks=float(sizes[hot].sum()),
        diskann_chunks=float(sizes[cold].sum()),
        exact_tenants=int(tiny.sum()),
        hnsw_tenants=int(hot.sum()),
        diskann_tenants=int(cold.sum()),
    )


def workload_tiers(workload: Workload) -> TierSplit:
    corpus = workload.corpus
    if corpus.chunks_per_tenant:
        sizes = np.sort(np.asarray(corpus.chunks_per_tenant, dtype=np.float64))[::-1]
    else:
        sizes = tenant_sizes(corpus.total_chunks, corpus.tenants, corpus.zipf_exponent)
    return split_tiers(sizes, workload.tiering)


def total_chunks(workload: Workload) -> float:
    if workload.corpus.chunks_per_tenant:
        return float(sum(workload.corpus.chunks_per_tenant))
    return float(workload.corpus.total_chunks)


# ---------------------------------------------------------------- bytes per chunk


def vector_bytes(dims: int, dtype: str) -> int:
    return dims * BYTES_PER_DTYPE[dtype]


def hnsw_bytes_per_vector(dims: int, hnsw: HnswSpec) -> float:
    """One copy of one node of a faiss HNSW index.

    Vector + 2*M links on level 0 + M links on each upper level. faiss draws a node's top level with
    P(level >= l) = M**-l, so a node has on average 1/(M-1) upper levels. Plus per-node bookkeeping.
    """
    level0_links = 2 * hnsw.m * hnsw.link_bytes
    upper_links = hnsw.m * hnsw.link_bytes / (hnsw.m - 1)
    return vector_bytes(dims, hnsw.storage_dtype) + level0_links + upper_links + hnsw.per_vector_overhead_bytes


def diskann_ram_bytes_per_vector(dims: int, diskann: DiskannSpec) -> float:
    """PQ code + id map in RAM, plus this vector's share of the cached SSD nodes."""
    cached = diskann.cached_node_fraction * diskann_ssd_bytes_per_vector(dims, diskann)
    return diskann.pq_bytes + diskann.per_vector_overhead_bytes + cached


def diskann_ssd_bytes_per_vector(dims: int, diskann: DiskannSpec) -> float:
    """Bytes one node takes on SSD: its record (vector, degree, R ids) packed whole into sectors.

    DiskANN never splits a node across sectors, so a 1,796-byte record takes 2,048 of a 4 KiB sector.
    """
    record = (
        vector_bytes(dims, diskann.full_vector_dtype)
        + DISKANN_DEGREE_FIELD_BYTES
        + diskann.max_degree * 4
    )
    if record >= diskann.sector_bytes:
        return math.ceil(record / diskann.sector_bytes) * diskann.sector_bytes
    nodes_per_sector = diskann.sector_bytes // record
    return diskann.sector_bytes / nodes_per_sector


def exact_bytes_per_vector(dims: int, exact: ExactSpec) -> float:
    return float(vector_bytes(dims, exact.storage_dtype))


# ---------------------------------------------------------------- RAM and SSD


def hnsw_ram_bytes(chunks: float, dims: int, hnsw: HnswSpec, copies: int | None = None) -> float:
    """RAM for `chunks` vectors in HNSW, times the copies kept (400M fp16 M=32 x2 -> ~0.84 TB)."""
    return chunks * hnsw_bytes_per_vector(dims, hnsw) * (copies or hnsw.copies)


def diskann_ram_bytes(chunks: float, dims: int, diskann: DiskannSpec, copies: int | None = None) -> float:
    return chunks * diskann_ram_bytes_per_vector(dims, diskann) * (copies or diskann.copies)


def diskann_ssd_bytes(chunks: float, dims: int, diskann: DiskannSpec, copies: int | None = None) -> float:
    return chunks * diskann_ssd_bytes_per_vector(dims, diskann) * (copies or diskann.copies)


def exact_ram_bytes(chunks: float, dims: int, exact: ExactSpec, copies: int | None = None) -> float:
    return chunks * exact_bytes_per_vector(dims, exact) * (copies or exact.copies)


def with_headroom(index_bytes: float, headroom_fraction: float) -> float:
    return index_bytes * (1.0 + headroom_fraction)


def ram_breakdown(workload: Workload, tiers: TierSplit, replicas_per_shard: int = 0) -> dict:
    """RAM per tier (index bytes x copies) and the total with headroom.

    A shard needing more replicas than the tier's configured copies holds more copies.
    """
    dims = workload.embedding.dims
    hnsw = hnsw_ram_bytes(tiers.hnsw_chunks, dims, workload.hnsw, max(workload.hnsw.copies, replicas_per_shard))
    diskann = diskann_ram_bytes(
        tiers.diskann_chunks, dims, workload.diskann, max(workload.diskann.copies, replicas_per_shard)
    )
    exact = exact_ram_bytes(tiers.exact_chunks, dims, workload.exact, max(workload.exact.copies, replicas_per_shard))
    index_total = hnsw + diskann + exact
    total = with_headroom(index_total, workload.retriever.ram_headroom_fraction)
    return {"hnsw": hnsw, "diskann": diskann, "exact": exact, "headroom": total - index_total, "total": total}


def ram_if_single_tier(workload: Workload) -> dict:
    """RAM (with headroom) if the whole corpus sat in one tier: the what-if behind tiering."""
    chunks, dims = total_chunks(workload), workload.embedding.dims
    headroom = workload.retriever.ram_headroom_fraction
    return {
        "hnsw": with_headroom(hnsw_ram_bytes(chunks, dims, workload.hnsw), headroom),
        "diskann": with_headroom(diskann_ram_bytes(chunks, dims, workload.diskann), headroom),
        "exact": with_headroom(exact_ram_bytes(chunks, dims, workload.exact), headroom),
    }


def ssd_breakdown(workload: Workload, tiers: TierSplit) -> dict:
    """SSD per replica set: DiskANN files, persisted HNSW/exact segments, chunk table, BM25.

    Every tier persists its segments so a replica can restart from disk; each copy has its own disk.
    """
    dims, corpus = workload.embedding.dims, workload.corpus
    chunks = total_chunks(workload)
    diskann = diskann_ssd_bytes(tiers.diskann_chunks, dims, workload.diskann)
    hnsw_files = hnsw_ram_bytes(tiers.hnsw_chunks, dims, workload.hnsw)
    exact_files = exact_ram_bytes(tiers.exact_chunks, dims, workload.exact)
    copies = max(workload.hnsw.copies, workload.diskann.copies, workload.exact.copies)
    chunk_table = chunks * corpus.chunk_text_bytes * corpus.chunk_table_compression * copies
    bm25 = chunks * corpus.bm25_bytes_per_chunk * copies
    parts = {
        "diskann": diskann,
        "hnsw_segments": hnsw_files,
        "exact_segments": exact_files,
        "chunk_table": chunk_table,
        "bm25": bm25,
    }
    return parts | {"total": sum(parts.values())}


# ---------------------------------------------------------------- traffic


def searches_per_question(workload: Workload) -> float:
    traffic = workload.traffic
    multistep_share = 1 - traffic.simple_share
    return traffic.simple_share * traffic.searches_per_simple + multistep_share * traffic.searches_per_multistep


def generator_calls_per_question(workload: Workload) -> float:
    traffic = workload.traffic
    return (
        traffic.simple_share * traffic.generator_calls_per_simple
        + (1 - traffic.simple_share) * traffic.generator_calls_per_multistep
    )


def questions_per_day(workload: Workload, load_multiplier: float = 1.0) -> float:
    return workload.traffic.questions_per_day * load_multiplier


def agentic_runs_per_day(workload: Workload, load_multiplier: float = 1.0) -> float:
    """Multi-step questions go the agentic path (DESIGN.md §10), the only one that proposes actions."""
    return questions_per_day(workload, load_multiplier) * (1 - workload.traffic.simple_share)


def peak_questions_per_s(workload: Workload, load_multiplier: float = 1.0) -> float:
    return questions_per_day(workload, load_multiplier) / SECONDS_PER_DAY * workload.traffic.peak_factor


def peak_searches_per_s(workload: Workload, load_multiplier: float = 1.0) -> float:
    """Searches/s at the peak hour (2M questions/day, x2.5 peak, 3.28 searches each -> ~190)."""
    return peak_questions_per_s(workload, load_multiplier) * searches_per_question(workload)


def traffic_report(workload: Workload) -> dict:
    searches = peak_searches_per_s(workload)
    return {
        "questions_per_s_avg": workload.traffic.questions_per_day / SECONDS_PER_DAY,
        "questions_per_s_peak": peak_questions_per_s(workload),
        "searches_per_question": searches_per_question(workload),
        "searches_per_s_peak": searches,
        "rerank_pairs_per_s_peak": searches * workload.traffic.rerank_candidates,
        "generator_calls_per_day": workload.traffic.questions_per_day * generator_calls_per_question(workload),
    }


# ---------------------------------------------------------------- GPUs


def gpus_to_embed_corpus(chunks: float, seq_per_s_per_gpu: float, efficiency: float, target_hours: float) -> int:
    """GPUs that embed `chunks` within `target_hours` at `efficiency` of the raw rate."""
    gpu_seconds = chunks / (seq_per_s_per_gpu * efficiency)
    return max(1, math.ceil(gpu_seconds / (target_hours * SECONDS_PER_HOUR)))


def query_gpu_busy(workload: Workload, load_multiplier: float = 1.0) -> float:
    """GPU-seconds per second that query embedding and reranking need at peak."""
    models = workload.models
    searches = peak_searches_per_s(workload, load_multiplier)
    embed = searches / (models.query_embed_seq_per_s_per_gpu * models.gpu_efficiency)
    rerank = searches * workload.traffic.rerank_candidates / (models.rerank_pairs_per_s_per_gpu * models.gpu_efficiency)
    return embed + rerank


def query_gpus_needed(workload: Workload, load_multiplier: float = 1.0) -> int:
    busy = query_gpu_busy(workload, load_multiplier)
    return math.ceil(busy / workload.models.gpu_target_utilisation) if busy > 0 else 0


def cpu_embed_rate_per_core(workload: Workload) -> float:
    """Measured CPU embed rate per core when calibrated, else the workload's default."""
    measured = workload.measured
    if measured.embed_seq_per_s_cpu and measured.cpu_cores:
        return measured.embed_seq_per_s_cpu / measured.cpu_cores
    return workload.models.embed_seq_per_s_per_cpu_core


def gpu_report(workload: Workload) -> dict:
    models = workload.models
    chunks = total_chunks(workload)
    ingest = gpus_to_embed_corpus(
        chunks, models.embed_seq_per_s_per_gpu, models.gpu_efficiency, workload.ingest.reembed_target_hours
    )
    # A deployment with no query GPUs (limits.query_gpus = 0) embeds queries on CPU instead.
    on_gpu = workload.limits.query_gpus > 0
    return {
        "ingest": ingest,
        "ingest_hours_on_one_gpu": chunks / (models.embed_seq_per_s_per_gpu * models.gpu_efficiency) / SECONDS_PER_HOUR,
        "ingest_cpu_core_hours": chunks / cpu_embed_rate_per_core(workload) / SECONDS_PER_HOUR,
        "query": query_gpus_needed(workload) if on_gpu else 0,
        "query_busy_gpus": query_gpu_busy(workload),
        "query_embed_cpu_cores_without_gpu": math.ceil(
            peak_searches_per_s(workload) / cpu_embed_rate_per_core(workload)
        ),
    }


# ---------------------------------------------------------------- retriever replicas and queueing


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue (offered_load = lambda / mu, in servers).

    Computed through the Erlang B recursion, which stays stable for hundreds of servers.
    """
    if offered_load >= servers:
        return 1.0
    erlang_b = 1.0
    for k in range(1, servers + 1):
        erlang_b = offered_load * erlang_b / (k + offered_load * erlang_b)
    utilisation = offered_load / servers
    return erlang_b / (1.0 - utilisation * (1.0 - erlang_b))


def mmc_mean_wait_s(arrival_per_s: float, service_s: float, servers: int) -> float:
    """Mean time in queue of an M/M/c system: C(c, a) / (c * mu - lambda); inf when overloaded."""
    offered = arrival_per_s * service_s
    if offered >= servers:
        return math.inf
    return erlang_c(servers, offered) * service_s / (servers - offered)


def replicas_for_utilisation(arrival_per_s: float, service_s: float, concurrency: int, target: float) -> int:
    """Replicas so that busy slots / all slots stays at or under `target`."""
    return max(1, math.ceil(arrival_per_s * service_s / (concurrency * target)))


def search_service_s(workload: Workload) -> float:
    """One search on a replica: calibrated index times plus the fixed hop, else the workload value."""
    measured, retriever = workload.measured, workload.retriever
    if measured.hnsw_search_ms is not None and measured.bm25_search_ms is not None:
        return (measured.hnsw_search_ms + measured.bm25_search_ms + retriever.per_request_overhead_ms) / 1e3
    return retriever.search_service_ms / 1e3


def exact_search_ms(workload: Workload, vectors: float) -> float:
    """Brute-force search over `vectors` on one core, at the calibrated scan rate if measured."""
    rate = workload.measured.exact_scan_vectors_per_s or workload.retriever.exact_scan_vectors_per_s
    return vectors / rate * 1e3


def shard_count(workload: Workload, tiers: TierSplit) -> int:
    """Shards so one copy of the index, with headroom, fits each node's index RAM."""
    dims = workload.embedding.dims
    one_copy = (
        hnsw_ram_bytes(tiers.hnsw_chunks, dims, workload.hnsw, copies=1)
        + diskann_ram_bytes(tiers.diskann_chunks, dims, workload.diskann, copies=1)
        + exact_ram_bytes(tiers.exact_chunks, dims, workload.exact, copies=1)
    )
    one_copy_with_headroom = with_headroom(one_copy, workload.retriever.ram_headroom_fraction)
    return max(1, math.ceil(one_copy_with_headroom / workload.retriever.shard_ram_bytes))


def replica_report(workload: Workload, tiers: TierSplit, load_multiplier: float = 1.0) -> dict:
    retriever = workload.retriever
    shards = shard_count(workload, tiers)
    service = search_service_s(workload)
    per_shard_qps = peak_searches_per_s(workload, load_multiplier) / shards * retriever.shard_imbalance
    for_load = replicas_for_utilisation(
        per_shard_qps, service, retriever.concurrency_per_replica, retriever.target_utilisation
    )
    min_copies = min(workload.hnsw.copies, workload.diskann.copies, workload.exact.copies)
    per_shard = max(for_load, min_copies)
    slots = per_shard * retriever.concurrency_per_replica
    return {
        "shards": shards,
        "per_shard": per_shard,
        "per_shard_for_load": for_load,
        "total": shards * per_shard,
        "per_shard_searches_per_s": per_shard_qps,
        "search_service_ms": service * 1e3,
        "utilisation_at_peak": per_shard_qps * service / slots,
        "mean_queue_wait_ms": mmc_mean_wait_s(per_shard_qps, service, slots) * 1e3,
        # The slowest exact (tiny-tier) search: a tenant right at the tiny threshold.
        "exact_search_ms_at_tiny_max": exact_search_ms(workload, workload.tiering.tiny_max_chunks),
        # With one replica gone the rest must still keep up (busy slots < slots left).
        "survives_one_replica_loss": per_shard > 1
        and per_shard_qps * service < slots - retriever.concurrency_per_replica,
    }


def replicas_per_shard_curve(workload: Workload, qps_values: list[float]) -> list[int]:
    """Replicas one shard needs at each per-shard search rate (for the replicas-vs-QPS plot)."""
    retriever = workload.retriever
    service = search_service_s(workload)
    return [
        replicas_for_utilisation(qps, service, retriever.concurrency_per_replica, retriever.target_utilisation)
        for qps in qps_values
    ]


# ---------------------------------------------------------------- generator tokens and cost


def generator_calls_per_day(workload: Workload, load_multiplier: float = 1.0) -> float:
    return questions_per_day(workload, load_multiplier) * generator_calls_per_question(workload)


def quota_tokens_per_call(workload: Workload) -> float:
    """Tokens one call charges against the provider quota (cache reads count if the provider says so)."""
    prompt = workload.prompt
    prefix = prompt.shared_prefix_tokens
    if not workload.generator.cached_tokens_count_toward_quota:
        prefix *= 1.0 - prompt.cache_hit_rate
    return prefix + prompt.uncached_tokens + prompt.output_tokens


def generator_tokens_per_minute_peak(workload: Workload, load_multiplier: float = 1.0) -> float:
    calls_per_day = generator_calls_per_day(workload, load_multiplier)
    calls_per_minute = calls_per_day / MINUTES_PER_DAY * workload.traffic.peak_factor
    return calls_per_minute * quota_tokens_per_call(workload)


def generator_report(workload: Workload) -> dict:
    tpm = generator_tokens_per_minute_peak(workload)
    quota = workload.generator.quota_tokens_per_minute
    return {
        "calls_per_day": generator_calls_per_day(workload),
        "tokens_per_minute_peak": tpm,
        "quota_tokens_per_minute": quota,
        "quota_utilisation_at_peak": tpm / quota,
    }


def input_cost_per_call(prefix_tokens: float, uncached_tokens: float, price_per_million: float,
                        cached_price_fraction: float, cache_hit_rate: float) -> float:
    """USD of one call's input: the prefix at the cached price when it hits, the rest at full price."""
    prefix_price_factor = cache_hit_rate * cached_price_fraction + (1.0 - cache_hit_rate)
    billed_tokens = prefix_tokens * prefix_price_factor + uncached_tokens
    return billed_tokens * price_per_million / TOKENS_PER_MILLION


def cost_report(workload: Workload, ram_total_bytes: float, query_gpus: int) -> dict:
    """Daily cost by part, and per question with and without the prompt cache."""
    prompt, prices = workload.prompt, workload.prices
    calls = generator_calls_per_day(workload)
    input_uncached = calls * input_cost_per_call(
        prompt.shared_prefix_tokens, prompt.uncached_tokens, prices.input_per_million_tokens, 1.0, 0.0
    )
    input_cached = calls * input_cost_per_call(
        prompt.shared_prefix_tokens, prompt.uncached_tokens, prices.input_per_million_tokens,
        prices.cached_input_price_fraction, prompt.cache_hit_rate,
    )
    output = calls * prompt.output_tokens * prices.output_per_million_tokens / TOKENS_PER_MILLION
    gpus = query_gpus * 24 * prices.gpu_hour
    ram = ram_total_bytes / BYTES_PER_GB * prices.ram_gb_month / DAYS_PER_MONTH
    questions = workload.traffic.questions_per_day
    infra = gpus + ram
    return {
        "llm_input_per_day_uncached": input_uncached,
        "llm_input_per_day_cached": input_cached,
        "llm_output_per_day": output,
        "query_gpus_per_day": gpus,
        "ram_per_day": ram,
        "per_day_cached": input_cached + output + infra,
        "per_day_uncached": input_uncached + output + infra,
        "per_question_cached": (input_cached + output + infra) / questions,
        "per_question_uncached": (input_uncached + output + infra) / questions,
    }


# ---------------------------------------------------------------- what runs out first


def resource_needs(workload: Workload, tiers: TierSplit, load_multiplier: float) -> dict[str, tuple[float, float]]:
    """(need, limit) per load-dependent resource at `load_multiplier` x today's traffic."""
    replicas = replica_report(workload, tiers, load_multiplier)
    limits = workload.limits
    needs = {
        "generator_quota": (
            generator_tokens_per_minute_peak(workload, load_multiplier),
            workload.generator.quota_tokens_per_minute,
        ),
        "retriever_cpu_cores": (
            replicas["total"] * workload.retriever.concurrency_per_replica,
            float(limits.retriever_cpu_cores),
        ),
        "cluster_ram": (ram_breakdown(workload, tiers, replicas["per_shard"])["total"], limits.cluster_ram_bytes),
    }
    if limits.query_gpus > 0:
        needs["query_gpus"] = (float(query_gpus_needed(workload, load_multiplier)), float(limits.query_gpus))
    return needs


def load_headroom(workload: Workload, tiers: TierSplit, resource: str, iterations: int = 40) -> float:
    """Largest multiple of today's load at which `resource` still fits its limit (bisection).

    0 means it does not fit even with no growth; MAX_LOAD_MULTIPLIER means it never ran out.
    """
    def fits(multiplier: float) -> bool:
        need, limit = resource_needs(workload, tiers, multiplier)[resource]
        return need <= limit

    if fits(MAX_LOAD_MULTIPLIER):
        return MAX_LOAD_MULTIPLIER
    low, high = 0.0, MAX_LOAD_MULTIPLIER
    for _ in range(iterations):
        middle = (low + high) / 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def exhaustion_report(workload: Workload, tiers: TierSplit) -> dict:
    headroom = {name: load_headroom(workload, tiers, name) for name in resource_needs(workload, tiers, 1.0)}
    first = min(headroom, key=headroom.get)
    return {"first_to_run_out": first, "at_load_multiplier": headroom[first], "headroom_multiplier": headroom}


# ---------------------------------------------------------------- where queues grow without bound


def saturation_multiplier(capacity: float, busy_at_today: float) -> float:
    """Multiple of today's load at which `busy` reaches `capacity` (utilisation 1, the queue grows
    without bound). Busy work is linear in load, so it is their ratio; MAX_LOAD_MULTIPLIER for work
    that never saturates (none offered), 0 for work with no capacity at all."""
    if busy_at_today <= 0:
        return MAX_LOAD_MULTIPLIER
    return min(capacity / busy_at_today, MAX_LOAD_MULTIPLIER)


def max_replicas_per_shard(workload: Workload, tiers: TierSplit) -> int:
    """Most replicas each shard can have within the cluster's retriever cores and index RAM (every
    replica holds a copy of its shard); 0 when even the configured copies do not fit the RAM."""
    limits, retriever = workload.limits, workload.retriever
    replicas = limits.retriever_cpu_cores // (retriever.concurrency_per_replica * shard_count(workload, tiers))
    while replicas > 0 and ram_breakdown(workload, tiers, replicas)["total"] > limits.cluster_ram_bytes:
        replicas -= 1
    return replicas


def machine_saturation_report(workload: Workload, tiers: TierSplit) -> dict[str, dict]:
    """Per queueing resource, the load multiple at which it is 100% busy: `as_sized` with what this plan
    sizes for today's load, `at_limits` grown as far as `limits` allow (replicas per shard by cores and
    RAM, the GPUs there are). The comparable figure to a team's: people do not autoscale, replicas do.

    Unlike `exhaustion_report` (planned at the target utilisation), this is where the queue itself
    grows without bound; the busiest shard (imbalance) saturates first."""
    replicas = replica_report(workload, tiers)
    concurrency = workload.retriever.concurrency_per_replica
    busy_slots = replicas["per_shard_searches_per_s"] * search_service_s(workload)
    report = {
        "retriever_replicas": {
            "kind": "machine",
            "as_sized": saturation_multiplier(replicas["per_shard"] * concurrency, busy_slots),
            "at_limits": saturation_multiplier(max_replicas_per_shard(workload, tiers) * concurrency, busy_slots),
        },
    }
    if workload.limits.query_gpus > 0:  # without GPUs queries embed on the retriever's CPUs
        busy_gpus = query_gpu_busy(workload)
        report["query_gpus"] = {
            "kind": "machine",
            "as_sized": saturation_multiplier(query_gpus_needed(workload), busy_gpus),
            "at_limits": saturation_multiplier(workload.limits.query_gpus, busy_gpus),
        }
    quota = saturation_multiplier(workload.generator.quota_tokens_per_minute,
                                  generator_tokens_per_minute_peak(workload))
    report["generator_quota"] = {"kind": "provider quota", "as_sized": quota, "at_limits": quota}
    return report


# ---------------------------------------------------------------- the whole plan


def build_plan(workload: Workload) -> dict:
    """Every machine figure `plan` reports, as one JSON-able mapping (the people beside them are
    capacity/reviewers.py's `people_report`, built on the functions here)."""
    tiers = workload_tiers(workload)
    replicas = replica_report(workload, tiers)
    ram = ram_breakdown(workload, tiers, replicas["per_shard"])
    ssd = ssd_breakdown(workload, tiers)
    gpus = gpu_report(workload)
    resilience = workload.resilience
    dims = workload.embedding.dims
    return {
        "workload": workload.name,
        "chunks": total_chunks(workload),
        "tiers": tiers.as_dict(),
        "bytes_per_chunk": {
            "hnsw": hnsw_bytes_per_vector(dims, workload.hnsw),
            "diskann_ram": diskann_ram_bytes_per_vector(dims, workload.diskann),
            "diskann_ssd": diskann_ssd_bytes_per_vector(dims, workload.diskann),
            "exact": exact_bytes_per_vector(dims, workload.exact),
        },
        "ram_bytes": ram,
        "ram_bytes_if_single_tier": ram_if_single_tier(workload),
        "ssd_bytes": ssd["total"],
        "ssd_breakdown": ssd,
        "traffic": traffic_report(workload),
        "gpus": gpus,
        "replicas": replicas,
        "generator": generator_report(workload),
        "cost_usd": cost_report(workload, ram["total"], gpus["query"]),
        "error_budget": error_budget_report(
            workload.availability.target, workload.traffic.questions_per_day, workload.availability.period_days
        ),
        "retry_storm": storm_loads(
            base_qps=peak_searches_per_s(workload),
            replicas=resilience.replicas,
            replicas_down=resilience.replicas_down,
            retries_per_layer=resilience.retries_per_layer,
            retry_budget=resilience.retry_budget,
            budget_max_attempts=resilience.budget_max_attempts,
            hedge_quantile=resilience.hedge_quantile,
            hedge_budget=resilience.hedge_budget,
        ),
        "exhaustion": exhaustion_report(workload, tiers),
    }
