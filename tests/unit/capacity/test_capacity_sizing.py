"""Sizing: the agentic-RAG design's RAM and cost figures, and the arithmetic under them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from capacity import sizing
from capacity.workload import DiskannSpec, HnswSpec, TieringSpec, Workload, load_workload

REPO = Path(__file__).resolve().parents[3]
AGENTIC = REPO / "cluster" / "workloads" / "agentic-400m.yaml"
SMALL_TEAM = REPO / "cluster" / "workloads" / "small-team.yaml"
TB = 1e12


@pytest.fixture(scope="module")
def agentic() -> Workload:
    return load_workload(AGENTIC)


@pytest.fixture(scope="module")
def agentic_plan(agentic: Workload) -> dict:
    return sizing.build_plan(agentic)


def test_hnsw_node_bytes_follow_faiss_layout() -> None:
    # fp16 vector 768 B + level-0 links 2*32*4 = 256 B + upper levels 32*4/31 + 20 B bookkeeping.
    assert sizing.hnsw_bytes_per_vector(384, HnswSpec(m=32, storage_dtype="float16")) == pytest.approx(
        768 + 256 + 128 / 31 + 20
    )
    # fp32 at 1M vectors: ~1.82 GB, the ~1.7 GiB DESIGN measured for faiss HNSW M=32 on 1M x 384.
    fp32 = sizing.hnsw_ram_bytes(1_000_000, 384, HnswSpec(storage_dtype="float32"), copies=1)
    assert fp32 / 2**30 == pytest.approx(1.7, rel=0.02)


def test_400m_chunks_in_two_hnsw_copies_need_about_1_tb(agentic: Workload, agentic_plan: dict) -> None:
    # Index bytes alone: 400M x 1,048 B x 2 = 0.84 TB; with the 20% RAM headroom (allocator slack,
    # query working sets, a new segment beside the old one at publish) about 1.0 TB. We accept
    # 0.9-1.2 TB: 1.2 TB would be fp16 with 40% headroom, below 0.9 TB no headroom at all.
    index_only = sizing.hnsw_ram_bytes(400e6, 384, agentic.hnsw)
    assert index_only == pytest.approx(0.84 * TB, rel=0.01)
    needed = agentic_plan["ram_bytes_if_single_tier"]["hnsw"]
    assert 0.9 * TB <= needed <= 1.2 * TB
    # The workload's own mix (every non-tiny tenant hot, tiny ones exact) lands there too.
    assert 0.9 * TB <= agentic_plan["ram_bytes"]["total"] <= 1.2 * TB
    assert agentic_plan["chunks"] == 400e6


def test_ram_total_is_tiers_plus_headroom(agentic_plan: dict) -> None:
    ram = agentic_plan["ram_bytes"]
    tiers = ram["hnsw"] + ram["diskann"] + ram["exact"]
    assert ram["total"] == pytest.approx(tiers * 1.2)
    assert ram["headroom"] == pytest.approx(tiers * 0.2)


def test_diskann_keeps_pq_codes_in_ram_and_sector_aligned_nodes_on_ssd() -> None:
    spec = DiskannSpec(pq_bytes=64, max_degree=64, cached_node_fraction=0.0)
    # 1536 B vector + 4 B degree + 64 x 4 B ids = 1796 B -> two per 4 KiB sector -> 2048 B each.
    assert sizing.diskann_ssd_bytes_per_vector(384, spec) == 2048
    # DESIGN measured 2 GB on disk for 1M vectors.
    assert sizing.diskann_ssd_bytes(1e6, 384, spec, copies=1) == pytest.approx(2.05e9, rel=0.01)
    assert sizing.diskann_ram_bytes_per_vector(384, spec) == 64 + 8


def test_tenant_sizes_sum_to_total_and_follow_zipf() -> None:
    sizes = sizing.tenant_sizes(1_000_000, 100, 1.0)
    assert sizes.sum() == pytest.approx(1_000_000)
    assert sizes[0] / sizes[9] == pytest.approx(10.0)


def test_tiers_split_by_size() -> None:
    sizes = np.array([10_000_000, 2_000_000, 50_000, 5_000])
    split = sizing.split_tiers(sizes, TieringSpec(tiny_max_chunks=20_000, hot_max_chunks=5_000_000))
    assert (split.exact_tenants, split.hnsw_tenants, split.diskann_tenants) == (1, 2, 1)
    assert split.diskann_chunks == 10_000_000
    everything_hot = sizing.split_tiers(sizes, TieringSpec(hot_max_chunks=None))
    assert everything_hot.diskann_chunks == 0


def test_small_team_uses_all_three_tiers() -> None:
    plan = sizing.build_plan(load_workload(SMALL_TEAM))
    assert all(plan["ram_bytes"][tier] > 0 for tier in ("hnsw", "diskann", "exact"))
    assert plan["gpus"]["query"] == 0  # CPU-only: queries are embedded on CPU cores
    assert plan["gpus"]["query_embed_cpu_cores_without_gpu"] >= 1


def test_peak_traffic_is_190_searches_and_3m_calls(agentic_plan: dict) -> None:
    traffic = agentic_plan["traffic"]
    assert traffic["searches_per_s_peak"] == pytest.approx(190, rel=0.01)
    assert traffic["generator_calls_per_day"] == pytest.approx(3e6)


def test_prompt_cache_cost_figures(agentic_plan: dict) -> None:
    # 3M calls/day, 4,050-token shared prefix + 12 uncached tokens, $3/M, cached at a tenth.
    cost = agentic_plan["cost_usd"]
    assert cost["llm_input_per_day_uncached"] == pytest.approx(36_600, rel=0.01)
    assert cost["llm_input_per_day_cached"] == pytest.approx(3_700, rel=0.02)


def test_input_cost_per_call_with_partial_cache_hits() -> None:
    full = sizing.input_cost_per_call(4000, 0, 3.0, 0.1, cache_hit_rate=0.0)
    half = sizing.input_cost_per_call(4000, 0, 3.0, 0.1, cache_hit_rate=0.5)
    assert full == pytest.approx(0.012)
    assert half == pytest.approx(0.012 * (0.5 + 0.05))


def test_gpu_counts(agentic_plan: dict) -> None:
    # 400M chunks at 38k x 0.5 seq/s = 5.8 GPU-hours; in 4 hours that is 2 GPUs.
    assert agentic_plan["gpus"]["ingest"] == 2
    assert sizing.gpus_to_embed_corpus(400e6, 38_000, 0.5, 24) == 1
    # Rerank dominates query time: 190 x 50 pairs/s at 15k pairs/s per GPU = 0.63 busy -> 2 at 60%.
    assert agentic_plan["gpus"]["query_busy_gpus"] == pytest.approx(0.64, abs=0.01)
    assert agentic_plan["gpus"]["query"] == 2


def test_erlang_c_known_values() -> None:
    # M/M/1: P(wait) = utilisation; mean wait = rho / (mu - lambda).
    assert sizing.erlang_c(1, 0.7) == pytest.approx(0.7)
    assert sizing.mmc_mean_wait_s(70, 0.01, 1) == pytest.approx(0.7 / 30)
    # M/M/2 with a = 1.2 (textbook value 0.45).
    assert sizing.erlang_c(2, 1.2) == pytest.approx(0.45, abs=1e-3)
    assert math.isinf(sizing.mmc_mean_wait_s(100, 0.01, 1))


def test_replicas_for_target_utilisation() -> None:
    # 300 searches/s x 12 ms = 3.6 busy slots; 4 slots per replica at 60% -> 2 replicas.
    assert sizing.replicas_for_utilisation(300, 0.012, 4, 0.6) == 2
    assert sizing.replicas_for_utilisation(1, 0.012, 4, 0.6) == 1


def test_replica_report_keeps_copies_and_reports_utilisation(agentic_plan: dict) -> None:
    replicas = agentic_plan["replicas"]
    assert replicas["per_shard"] >= 2  # never fewer replicas than index copies
    assert replicas["total"] == replicas["shards"] * replicas["per_shard"]
    assert 0 < replicas["utilisation_at_peak"] < 0.6


def test_generator_quota_runs_out_first(agentic_plan: dict) -> None:
    generator = agentic_plan["generator"]
    assert generator["tokens_per_minute_peak"] == pytest.approx(3e6 / 1440 * 2.5 * (4050 + 12 + 300))
    exhaustion = agentic_plan["exhaustion"]
    assert exhaustion["first_to_run_out"] == "generator_quota"
    assert exhaustion["at_load_multiplier"] == pytest.approx(30e6 / generator["tokens_per_minute_peak"], rel=1e-6)
    resources = {"generator_quota", "retriever_cpu_cores", "cluster_ram", "query_gpus"}
    assert set(exhaustion["headroom_multiplier"]) == resources


def test_measured_rates_override_search_time(agentic: Workload) -> None:
    from capacity.workload import MeasuredRates, with_rates

    calibrated = with_rates(agentic, MeasuredRates(hnsw_search_ms=1.0, bm25_search_ms=0.5))
    assert sizing.search_service_s(calibrated) == pytest.approx((1.0 + 0.5 + 6.0) / 1e3)
    assert sizing.search_service_s(agentic) == pytest.approx(0.012)


def test_exact_search_time_uses_the_calibrated_scan_rate(agentic: Workload) -> None:
    from capacity.workload import MeasuredRates, with_rates

    assert sizing.exact_search_ms(agentic, 20_000) == pytest.approx(5.0)  # 20k at the default 4M/s
    calibrated = with_rates(agentic, MeasuredRates(exact_scan_vectors_per_s=2e6))
    assert sizing.exact_search_ms(calibrated, 20_000) == pytest.approx(10.0)
