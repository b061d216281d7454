"""The typed workload spec that `citadel capacity plan` sizes (pydantic v2, loaded from YAML).

Every number the planner uses is a named, documented field here with a default; the YAML files in
`cluster/workloads/` only override what differs. Units are in the field names (`_bytes`, `_ms`,
`_per_s`, `_per_day`, `_hours`); "TB" in reports means 10**12 bytes.

Defaults come from DESIGN.md where it measured something (faiss HNSW M=32, fp16 storage, DiskANN
1M -> ~2 GB on disk, tantivy 200k docs -> 36 MB, MiniLM 38k seq/s on an H200) and from the
agentic-RAG figures otherwise; `capacity calibrate` replaces the machine-dependent ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

DType = Literal["float32", "float16", "int8"]
BYTES_PER_DTYPE: dict[str, int] = {"float32": 4, "float16": 2, "int8": 1}


class _Spec(BaseModel):
    # Unknown keys are typos in a capacity file, and a silently ignored typo is a wrong plan.
    model_config = ConfigDict(extra="forbid")


class CorpusSpec(_Spec):
    total_chunks: int = Field(400_000_000, gt=0, description="Chunks across all tenants.")
    tenants: int = Field(2_000, gt=0, description="Number of tenants sharing the cluster.")
    zipf_exponent: float = Field(
        1.0, ge=0, description="Tenant sizes follow size(rank) ~ rank**-s; 0 means equal tenants."
    )
    chunks_per_tenant: list[int] | None = Field(
        None, description="Explicit tenant sizes; when given they replace total_chunks/tenants/zipf."
    )
    chunk_text_bytes: int = Field(
        1_600, gt=0, description="UTF-8 text + heading path + context header stored per chunk."
    )
    chunk_table_compression: float = Field(
        0.35, gt=0, le=1, description="Parquet (zstd) size / raw size for the chunk table."
    )
    bm25_bytes_per_chunk: int = Field(
        180, ge=0, description="tantivy index bytes per chunk (DESIGN: 200k docs -> 36 MB)."
    )


class EmbeddingSpec(_Spec):
    dims: int = Field(384, gt=0, description="Embedding dimensions (all-MiniLM-L6-v2: 384).")
    tokens_per_chunk: int = Field(256, gt=0, description="Tokens the embedder reads per chunk.")


class HnswSpec(_Spec):
    m: int = Field(32, ge=2, description="HNSW M: links per node on upper levels, 2*M on level 0.")
    storage_dtype: DType = Field(
        "float16", description="Vector storage in the graph (IndexHNSWSQ fp16: -42% RAM, same recall)."
    )
    copies: int = Field(2, ge=1, description="Replicas of each hot shard kept in RAM.")
    per_vector_overhead_bytes: int = Field(
        20, ge=0, description="faiss bookkeeping per node: level (4) + offset (8) + id map (8)."
    )
    link_bytes: int = Field(4, gt=0, description="Bytes per neighbour id (faiss storage_idx_t).")


class DiskannSpec(_Spec):
    pq_bytes: int = Field(64, gt=0, description="PQ code bytes per vector, held in RAM.")
    max_degree: int = Field(64, gt=0, description="Graph degree R stored with each node on SSD.")
    full_vector_dtype: DType = Field("float32", description="Full-precision vectors on SSD.")
    sector_bytes: int = Field(4_096, gt=0, description="SSD node records are packed per sector.")
    cached_node_fraction: float = Field(
        0.005, ge=0, le=1, description="Nodes cached in RAM (num_nodes_to_cache; 0 hung in tests)."
    )
    per_vector_overhead_bytes: int = Field(8, ge=0, description="Id map entry per vector in RAM.")
    copies: int = Field(2, ge=1, description="Replicas of each cold shard (RAM and SSD each).")


class ExactSpec(_Spec):
    storage_dtype: DType = Field("float32", description="Vectors of tiny tenants, searched exactly.")
    copies: int = Field(2, ge=1, description="Replicas holding the tiny tenants' vectors.")


class TieringSpec(_Spec):
    """By size, as citadel.config.IndexConfig does (tiny/hot/cold); traffic is not modelled here."""

    tiny_max_chunks: int = Field(20_000, ge=0, description="At or below: exact search, no index.")
    hot_max_chunks: int | None = Field(
        5_000_000, description="At or below: HNSW in RAM; above: DiskANN. null: every tenant hot."
    )


class TrafficSpec(_Spec):
    questions_per_day: float = Field(2_000_000, gt=0, description="Questions answered per day.")
    peak_factor: float = Field(2.5, ge=1, description="Peak-hour rate / daily average rate.")
    simple_share: float = Field(0.6, ge=0, le=1, description="Share of one-retrieval questions.")
    searches_per_simple: float = Field(1.0, ge=0, description="Searches per simple question.")
    searches_per_multistep: float = Field(6.7, ge=0, description="Searches per multi-step question.")
    generator_calls_per_simple: float = Field(1.0, ge=0, description="Large-model calls, simple.")
    generator_calls_per_multistep: float = Field(
        2.25, ge=0, description="Large-model calls per multi-step question (plan, steps, answer)."
    )
    rerank_candidates: int = Field(50, ge=0, description="Passages the cross-encoder scores per search.")


class PromptSpec(_Spec):
    shared_prefix_tokens: int = Field(
        4_050, ge=0, description="Identical leading tokens of every call (system + tools): cacheable."
    )
    uncached_tokens: int = Field(
        12, ge=0, description="Per-call remainder after the cached prefix (newest message)."
    )
    output_tokens: int = Field(300, ge=0, description="Generated tokens per call.")
    cache_hit_rate: float = Field(
        1.0, ge=0, le=1, description="Share of calls whose prefix is read from the provider cache."
    )


class PricesSpec(_Spec):
    input_per_million_tokens: float = Field(3.0, ge=0, description="USD per 1M input tokens.")
    cached_input_price_fraction: float = Field(
        0.1, ge=0, le=1, description="Cached input tokens cost this fraction of the input price."
    )
    output_per_million_tokens: float = Field(15.0, ge=0, description="USD per 1M output tokens.")
    gpu_hour: float = Field(3.0, ge=0, description="USD per GPU-hour (query-time GPUs).")
    ram_gb_month: float = Field(3.5, ge=0, description="USD per GB-month of RAM (memory nodes).")


class ModelRatesSpec(_Spec):
    embed_seq_per_s_per_gpu: float = Field(
        38_000, gt=0, description="Raw MiniLM forward, 256 tokens, one H200 (DESIGN §6)."
    )
    query_embed_seq_per_s_per_gpu: float = Field(
        100_000, gt=0, description="Short query embeddings (~32 tokens) per GPU-second."
    )
    rerank_pairs_per_s_per_gpu: float = Field(
        30_000, gt=0, description="MiniLM-L6 cross-encoder pairs (~320 tokens) per GPU-second."
    )
    gpu_efficiency: float = Field(
        0.5, gt=0, le=1, description="Share of the raw rate a real pipeline keeps (I/O, batching)."
    )
    gpu_target_utilisation: float = Field(0.6, gt=0, le=1, description="Plan GPUs to this busy share.")
    embed_seq_per_s_per_cpu_core: float = Field(
        25, gt=0, description="CPU embed rate per core (DESIGN: ~50 passages/s on 2 cores)."
    )


class GeneratorSpec(_Spec):
    quota_tokens_per_minute: float = Field(
        30_000_000, gt=0, description="Provider quota, input + output tokens per minute."
    )
    cached_tokens_count_toward_quota: bool = Field(
        True, description="Whether cache reads use quota (provider-specific; safe default: yes)."
    )


class RetrieverSpec(_Spec):
    search_service_ms: float = Field(
        12.0, gt=0, description="CPU time of one search on a replica: ANN + BM25 + fuse + Serve hop."
    )
    per_request_overhead_ms: float = Field(
        6.0, ge=0, description="Serve hop + fusion, added to calibrated index times (DESIGN §5)."
    )
    exact_scan_vectors_per_s: float = Field(
        4e6, gt=0, description="Brute-force scan rate of one core (measured: ~4-5M 384-d fp32/s)."
    )
    concurrency_per_replica: int = Field(4, ge=1, description="Searches a replica runs at once (cores).")
    target_utilisation: float = Field(0.6, gt=0, lt=1, description="Busy share replicas are sized to.")
    shard_ram_bytes: float = Field(
        128e9, gt=0, description="Index RAM one retriever node can hold (one shard copy)."
    )
    shard_imbalance: float = Field(
        1.5, ge=1, description="Busiest shard's load / the mean shard load (Zipf tenants)."
    )
    ram_headroom_fraction: float = Field(
        0.2, ge=0, description="Extra RAM over index bytes: allocator slack, query working sets, and a "
        "new base segment loaded beside the old one before the atomic publish switch.",
    )


class IngestSpec(_Spec):
    reembed_target_hours: float = Field(
        4.0, gt=0, description="Re-embed the whole corpus (model change) within this many hours."
    )


class ResilienceSpec(_Spec):
    """The failure the plan prices: `replicas_down` of `replicas` black-holing requests."""

    replicas: int = Field(3, ge=1, description="Replicas behind one retrieval call.")
    replicas_down: int = Field(1, ge=0, description="Of which are dead (requests time out).")
    retries_per_layer: list[int] = Field(
        [3, 2, 2], description="Retries (not attempts) at each nested layer, outermost first."
    )
    retry_budget: float = Field(0.1, ge=0, description="One retry layer: retries <= this share.")
    budget_max_attempts: int = Field(3, ge=1, description="Attempts per request in that one layer.")
    hedge_quantile: float = Field(0.95, gt=0, lt=1, description="Hedge after this observed quantile.")
    hedge_budget: float = Field(0.1, ge=0, description="Hedges <= this share of requests.")


class AvailabilitySpec(_Spec):
    target: float = Field(0.999, gt=0, lt=1, description="Share of questions answered successfully.")
    period_days: float = Field(30, gt=0, description="Error-budget period (a month).")


class LimitsSpec(_Spec):
    """What the cluster has, to find which resource runs out first as load grows."""

    cluster_ram_bytes: float = Field(1.5e12, gt=0, description="RAM available to indexes.")
    retriever_cpu_cores: int = Field(64, gt=0, description="Cores available to retriever replicas.")
    query_gpus: int = Field(4, ge=0, description="GPUs available to query embed + rerank.")


class ReviewTeamSpec(_Spec):
    """One team of people who decide approvals and review tasks (DESIGN.md §10, §11).

    Volumes come from the workload's traffic: `questions_per_day` answers, of which the multi-step
    share (1 - `simple_share`) are agentic runs, the only path that proposes actions. A team's
    figures are all its reviewers together, across tenants.
    """

    name: str = Field("team", min_length=1, max_length=64,
                      description="The approver or reviewer group, as tools.yaml names it (e.g. deal-desk).")
    t2_approvals_per_run: float = Field(
        0.0, ge=0, le=1, description="Share of agentic runs that ask this team to approve a T2 action (money "
        "or hard to undo); each may get a honeypot twin at `people.honeypot_rate`.")
    t1_audits_per_run: float = Field(
        0.0, ge=0, le=1, description="Share of agentic runs whose T1 (reversible) write this team audits "
        "later: T1 writes per run x the tool's audit_share (0.05 by default, citadel/tools/spec.py).")
    failed_checks_per_question: float = Field(
        0.0, ge=0, le=1, description="Share of questions whose answer or action fails a check only a person "
        "settles (versions in conflict, a missing reference, an action out of scope) and waits for this team "
        "(citadel/reviews/tasks.py).")
    answer_audits_per_question: float = Field(
        0.0, ge=0, le=1, description="Share of answers this team audits by hand (the quality plane's sampled "
        "spot-checks and double labels).")
    reviewers: int = Field(1, ge=0, le=100_000, description="People deciding this team's queue.")
    hours_per_day: float = Field(
        6.0, gt=0, le=24, description="Hours per day each reviewer gives to the queue; the day's decisions "
        "are offered over these hours (what arrives outside them waits for the morning, not in the model).")
    minutes_per_decision: float = Field(
        5.0, gt=0, le=24 * 60, description="Mean minutes one decision takes a reviewer (reading, deciding, "
        "writing a comment); measured from citadel_approval_decision_seconds minus the queue wait.")


def _default_review_teams() -> list[ReviewTeamSpec]:
    """Teams sized for the default traffic (2M questions/day, 800k agentic runs). ASSUMED, not measured:
    shares chosen so each team's day is a plausible queue (Deal Desk ~400 discount approvals, the
    examples/crm T2 tool's group; knowledge-owners, config's tools.review_group, the failed checks
    no owner takes and the sampled answer audits), minutes from the work one decision is (a discount
    against policy: 5; a contract conflict: 12). Replace them with your teams' own figures."""
    return [
        ReviewTeamSpec(name="deal-desk", t2_approvals_per_run=0.0005, reviewers=17, hours_per_day=6,
                       minutes_per_decision=5),
        ReviewTeamSpec(name="legal", t2_approvals_per_run=0.00005, failed_checks_per_question=0.00002,
                       reviewers=20, hours_per_day=4, minutes_per_decision=12),
        ReviewTeamSpec(name="finance", t2_approvals_per_run=0.0002, t1_audits_per_run=0.0004, reviewers=20,
                       hours_per_day=5, minutes_per_decision=3),
        ReviewTeamSpec(name="security", t2_approvals_per_run=0.00005, failed_checks_per_question=0.000005,
                       reviewers=24, hours_per_day=2, minutes_per_decision=10),
        ReviewTeamSpec(name="knowledge-owners", failed_checks_per_question=0.0001,
                       answer_audits_per_question=0.0002, reviewers=80, hours_per_day=2, minutes_per_decision=4),
    ]


class PeopleSpec(_Spec):
    """The people behind approvals and review tasks: what `plan` sizes beside the machines."""

    honeypot_rate: float = Field(
        0.01, ge=0, le=1, description="Share of T2 approvals that get a deliberately wrong twin, each one "
        "more decision (DESIGN.md §10: about 1 in 100; tools.honeypot_rate).")
    teams: list[ReviewTeamSpec] = Field(
        default_factory=_default_review_teams, max_length=64,
        description="Each approver or reviewer group; names must be unique.")

    @field_validator("teams")
    @classmethod
    def _unique_names(cls, teams: list[ReviewTeamSpec]) -> list[ReviewTeamSpec]:
        names = [team.name for team in teams]
        if len(set(names)) != len(names):
            raise ValueError(f"team names must be unique: {names}")
        return teams


class MeasuredRates(_Spec):
    """Rates measured by `capacity calibrate` on this machine; present ones override defaults."""

    embed_seq_per_s_cpu: float | None = None
    rerank_pairs_per_s_cpu: float | None = None
    exact_scan_vectors_per_s: float | None = None
    hnsw_search_ms: float | None = None
    bm25_search_ms: float | None = None
    cpu_cores: int | None = None


class Workload(_Spec):
    name: str = "workload"
    description: str = ""
    corpus: CorpusSpec = CorpusSpec()
    embedding: EmbeddingSpec = EmbeddingSpec()
    hnsw: HnswSpec = HnswSpec()
    diskann: DiskannSpec = DiskannSpec()
    exact: ExactSpec = ExactSpec()
    tiering: TieringSpec = TieringSpec()
    traffic: TrafficSpec = TrafficSpec()
    prompt: PromptSpec = PromptSpec()
    prices: PricesSpec = PricesSpec()
    models: ModelRatesSpec = ModelRatesSpec()
    generator: GeneratorSpec = GeneratorSpec()
    retriever: RetrieverSpec = RetrieverSpec()
    ingest: IngestSpec = IngestSpec()
    resilience: ResilienceSpec = ResilienceSpec()
    availability: AvailabilitySpec = AvailabilitySpec()
    limits: LimitsSpec = LimitsSpec()
    people: PeopleSpec = PeopleSpec()
    measured: MeasuredRates = MeasuredRates()


def load_workload(path: str | Path) -> Workload:
    """Read a workload YAML file; missing sections and fields take the documented defaults."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    return Workload.model_validate(data)


def load_rates(path: str | Path) -> MeasuredRates:
    """Read the `rates:` mapping a `calibrate` run wrote (YAML or JSON; JSON is valid YAML)."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    rates = data.get("rates", data)
    known = {k: v for k, v in rates.items() if k in MeasuredRates.model_fields}
    return MeasuredRates.model_validate(known)


def with_rates(workload: Workload, rates: MeasuredRates) -> Workload:
    """Return a copy of `workload` whose measured rates are `rates` (measured values win)."""
    merged = workload.measured.model_dump() | rates.model_dump(exclude_none=True)
    return workload.model_copy(update={"measured": MeasuredRates.model_validate(merged)})
