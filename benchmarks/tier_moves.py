"""Tier moves of a synthetic tenant population under a Zipf query load over a simulated week
(citadel/segments/tiering.py), and query latency per tier on real partitions.

Population: `--tenants` tenants whose sizes follow Zipf (capacity.sizing.tenant_sizes) and whose daily
queries follow Zipf too, over a popularity order independent of size. Each simulated day the rates
drift (log-normal noise) and a share of tenants swap popularity with another (one goes quiet, another
gets busy). Queries are counted per hour into a real catalog's day rows (an in-memory SQLite
catalog's TrafficLog, as serving replicas flush them); moves happen only where the code makes them:
at a tenant's publish (`--publish-share` of tenants publish once a day, at a random hour) and at a
nightly compaction of the tenants whose tier the policy would change. The clock is simulated; one week
of history precedes the measured week so the traffic window is full.

Policies compared on the same load: the default (hysteresis `index.tier_margin`, minimum stay
`index.tier_min_stay_days`), the same thresholds without hysteresis or minimum stay, the default with
tenants under 100k chunks cold whatever their traffic (`index.hot_min_chunks`), and the size-only rule
from before traffic counted (hot up to 5M chunks, cold above). RAM per copy of every index, from
the capacity model's bytes per vector (capacity/sizing.py: HNSW fp16 graph, DiskANN PQ codes and
cache, exact float32), against every non-tiny tenant hot.

Latency: one partition per tier (exact at `--tiny-chunks`, HNSW and DiskANN at `--ann-chunks`, random
unit vectors and pseudo-text) is built with the code's segment builder, and `--queries` searches of the
vector leg (k=50) and of vector plus BM25 give p50/p95.

    python benchmarks/tier_moves.py                # about 3 minutes on 2 busy cores
    python benchmarks/tier_moves.py --skip-latency
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from capacity.sizing import (diskann_ram_bytes_per_vector, exact_bytes_per_vector,  # noqa: E402
                             hnsw_bytes_per_vector, tenant_sizes)
from capacity.workload import DiskannSpec, ExactSpec, HnswSpec  # noqa: E402
from citadel.catalog.base import TierEntry  # noqa: E402
from citadel.catalog.sqlite import SQLiteCatalog  # noqa: E402
from citadel.config import IndexConfig  # noqa: E402
from citadel.segments.build import SegmentSpec, build_segment, chunks_to_table  # noqa: E402
from citadel.segments.partition import Partition  # noqa: E402
from citadel.segments.tiering import COLD, HOT, SECONDS_PER_DAY, TINY, TierStanding, day_of, decide_tier, \
    queries_per_day  # noqa: E402
from citadel.types import Chunk  # noqa: E402

DIM = 384
HOURS = 24
START_DAY = 20_000  # the simulated clock's first day (any day works)
NIGHTLY_HOUR = 2
WORDS = [f"w{n}" for n in range(5000)]
SIZE_ONLY_HOT_MAX = 5_000_000  # the rule before traffic counted: hot up to this, cold above


@dataclass(frozen=True)
class Load:
    tenants: int
    total_chunks: int
    size_zipf: float
    queries_per_day: float
    query_zipf: float
    drift_sigma: float
    churn_share: float
    publish_share: float
    seed: int


class Population:
    """Sizes, names and each day's query rates of the synthetic tenants (the same for every policy)."""

    def __init__(self, load: Load):
        self.load = load
        rng = np.random.default_rng(load.seed)
        self.names = [f"t{i:04d}" for i in range(load.tenants)]
        self.sizes = np.maximum(1, tenant_sizes(load.total_chunks, load.tenants, load.size_zipf)).astype(np.int64)
        ranks = rng.permutation(load.tenants) + 1  # popularity independent of size
        weights = ranks.astype(np.float64) ** -load.query_zipf
        self.base_rates = load.queries_per_day * weights / weights.sum()
        self.days = [self._day_rates(rng, day) for day in range(14)]
        self.hourly = [[rng.poisson(rates / HOURS) for _ in range(HOURS)] for rates in self.days]
        self.publish_hour = [np.where(rng.random(load.tenants) < load.publish_share,
                                      rng.integers(0, HOURS, load.tenants), -1) for _ in range(14)]

    def _day_rates(self, rng: np.random.Generator, day: int) -> np.ndarray:
        if day > 0:
            swaps = rng.choice(self.load.tenants, (int(self.load.churn_share * self.load.tenants), 2), replace=False)
            for a, b in swaps:
                self.base_rates[[a, b]] = self.base_rates[[b, a]]
        return self.base_rates * rng.lognormal(0.0, self.load.drift_sigma, self.load.tenants)


def tier_ram_bytes() -> dict[str, float]:
    """Bytes of RAM per vector of each tier, one copy (capacity/sizing.py's model)."""
    one = {"copies": 1}
    return {TINY: exact_bytes_per_vector(DIM, ExactSpec(**one)), HOT: hnsw_bytes_per_vector(DIM, HnswSpec(**one)),
            COLD: diskann_ram_bytes_per_vector(DIM, DiskannSpec(**one))}


def simulate(population: Population, config: IndexConfig | None) -> dict:
    """Two weeks on the simulated clock; the second is measured. `config` None: the size-only rule."""
    catalog = SQLiteCatalog(":memory:")
    names, sizes = population.names, population.sizes
    ram_per_vector = tier_ram_bytes()
    tiers: dict[str, TierEntry] = {}
    moves = {"publish": 0, "nightly": 0}
    by_kind: dict[str, int] = {}
    ram_hours: list[float] = []
    served = {TINY: 0, HOT: 0, COLD: 0}

    def decide(index: int, now: float, per_day: float) -> str:
        if config is None:
            chunks = int(sizes[index])
            return TINY if chunks <= 20_000 else (HOT if chunks <= SIZE_ONLY_HOT_MAX else COLD)
        current = tiers.get(names[index])
        return decide_tier(names[index], int(sizes[index]), TierStanding(per_day, current, now), config)

    def build(indexes: list[int], now: float, kind: str, measured: bool) -> None:
        window = config.tier_window_days if config is not None else 7
        rates = queries_per_day(catalog, [names[i] for i in indexes], now, window)
        for i in indexes:
            tier = decide(i, now, rates[names[i]])
            current = tiers.get(names[i])
            if current is None or current.tier != tier:
                if current is not None and measured:
                    moves[kind] += 1
                    key = f"{current.tier}->{tier}"
                    by_kind[key] = by_kind.get(key, 0) + 1
                tiers[names[i]] = TierEntry(tier, now)

    everyone = list(range(len(names)))
    for day in range(14):
        measured = day >= 7
        for hour in range(HOURS):
            now = (START_DAY + day) * SECONDS_PER_DAY + hour * 3600
            if day == 0 and hour == 0:
                build(everyone, now, "publish", False)  # the first build of every tenant
            counts = population.hourly[day][hour]
            catalog.record_queries(day_of(now), {names[i]: int(n) for i, n in enumerate(counts) if n},
                                   keep_days=14)
            if hour == NIGHTLY_HOUR and day > 0:
                build(everyone, now, "nightly", measured)  # compaction of the tenants the policy moves
            publishing = [i for i in everyone if population.publish_hour[day][i] == hour]
            build(publishing, now, "publish", measured)
            if measured:
                ram_hours.append(sum(float(sizes[i]) * ram_per_vector[tiers[names[i]].tier] for i in everyone))
                for i, n in enumerate(counts):
                    served[tiers[names[i]].tier] += int(n)
    catalog.close()
    final = {tier: sum(1 for e in tiers.values() if e.tier == tier) for tier in (TINY, HOT, COLD)}
    total_queries = sum(served.values())
    return {"moves": moves["publish"] + moves["nightly"], "moves_at_publish": moves["publish"],
            "moves_at_nightly_compaction": moves["nightly"], "moves_by_kind": by_kind,
            "tenants_per_tier_at_end": final, "mean_ram_gib": round(float(np.mean(ram_hours)) / 2**30, 2),
            "query_share_per_tier": {t: round(n / total_queries, 4) for t, n in served.items()}}


def all_hot_ram_gib(population: Population) -> float:
    ram = tier_ram_bytes()
    return sum(float(s) * (ram[TINY] if s <= 20_000 else ram[HOT]) for s in population.sizes) / 2**30


# ------------------------------------------------------------------------ latency per tier
def _table(rng: np.random.Generator, count: int):
    chunks = [Chunk(chunk_id=f"t:d{n // 10}:v1:{n % 10:04d}", tenant_id="t", document_id=f"d{n // 10}", version=1,
                    ordinal=n % 10, title=f"Doc {n // 10}", heading_path=("Section",), page=None,
                    text=" ".join(rng.choice(WORDS, 60)), context_header=f"Doc {n // 10} > Section",
                    content_hash=f"h{n}", source=f"d{n // 10}.md", section_index=0) for n in range(count)]
    return chunks_to_table(chunks)


def _unit(rng: np.random.Generator, count: int) -> np.ndarray:
    vectors = rng.standard_normal((count, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def latency_per_tier(tiny_chunks: int, ann_chunks: int, queries: int) -> dict:
    rng = np.random.default_rng(11)
    work = Path(tempfile.mkdtemp(prefix="citadel-bench-tiers-"))
    rows = {}
    try:
        for tier, count in ((TINY, tiny_chunks), (HOT, ann_chunks), (COLD, ann_chunks)):
            started = time.perf_counter()
            path = build_segment(work / tier, SegmentSpec("t", tier, "bench-random", DIM), _table(rng, count),
                                 _unit(rng, count), IndexConfig())
            build_s = time.perf_counter() - started
            partition = Partition(path)
            index = partition.ann if partition.ann is not None else partition.exact
            vector_ms, total_ms = [], []
            for query in _unit(rng, queries):
                started = time.perf_counter()
                index.search(query, 50)
                vector_ms.append((time.perf_counter() - started) * 1000)
                partition.bm25.search(" ".join(rng.choice(WORDS, 6)), 50)
                total_ms.append((time.perf_counter() - started) * 1000)
            rows[tier] = {"chunks": count, "backend": partition.manifest.backend, "build_s": round(build_s, 1),
                          "vector_p50_ms": round(float(np.percentile(vector_ms, 50)), 2),
                          "vector_p95_ms": round(float(np.percentile(vector_ms, 95)), 2),
                          "vector_bm25_p50_ms": round(float(np.percentile(total_ms, 50)), 2),
                          "vector_bm25_p95_ms": round(float(np.percentile(total_ms, 95)), 2)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=1_000)
    parser.add_argument("--total-chunks", type=int, default=50_000_000, help="chunks of all tenants together")
    parser.add_argument("--size-zipf", type=float, default=1.0)
    parser.add_argument("--queries-per-day", type=float, default=200_000, help="queries a day of all tenants")
    parser.add_argument("--query-zipf", type=float, default=1.2)
    parser.add_argument("--drift", type=float, default=0.3, help="sigma of the daily log-normal rate noise")
    parser.add_argument("--churn", type=float, default=0.03, help="share of tenants swapping popularity a day")
    parser.add_argument("--publish-share", type=float, default=0.2, help="share of tenants publishing a day")
    parser.add_argument("--tiny-chunks", type=int, default=20_000)
    parser.add_argument("--ann-chunks", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    load = Load(args.tenants, args.total_chunks, args.size_zipf, args.queries_per_day, args.query_zipf, args.drift,
                args.churn, args.publish_share, seed=7)
    population = Population(load)
    default = IndexConfig()
    flat = default.model_copy(update={"tier_margin": 0.0, "tier_min_stay_days": 0.0})
    started = time.perf_counter()
    result = {
        "load": {**load.__dict__, "policy": {k: getattr(default, k) for k in (
            "tiny_max_chunks", "hot_min_chunks", "hot_min_queries_per_day", "tier_margin", "tier_min_stay_days",
            "tier_window_days")}},
        "all_hot_ram_gib": round(all_hot_ram_gib(population), 2),
        "ram_bytes_per_vector": {k: round(v, 1) for k, v in tier_ram_bytes().items()},
        "policies": {"size_and_traffic": simulate(population, default),
                     "no_hysteresis_no_min_stay": simulate(population, flat),
                     "small_tenants_cold_below_100k": simulate(population, default.model_copy(
                         update={"hot_min_chunks": 100_000})),
                     "size_only_before": simulate(population, None)},
    }
    for row in result["policies"].values():
        row["ram_saved_vs_all_hot"] = round(1 - row["mean_ram_gib"] / result["all_hot_ram_gib"], 3)
    result["simulation_s"] = round(time.perf_counter() - started, 1)
    if not args.skip_latency:
        result["latency_per_tier"] = latency_per_tier(args.tiny_chunks, args.ann_chunks, args.queries)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
