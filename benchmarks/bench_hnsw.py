"""HNSW benchmark: Citadel's HNSWIndex against raw faiss on the same graph, plus filtered search.

On N clustered 384-d unit vectors (default 1,000,000) it builds the faiss HNSW graph once and caches
it, with the vectors, queries and ground truth, under benchmarks/out/ (git-ignored); later runs
reuse the cache.  It then measures, in one run and on one thread:

- unfiltered recall@10 against exact search, and queries per CPU-second (time.process_time),
  through `HNSWIndex.search` and through raw `faiss_index.search` at the same efSearch, one query
  per call (the serving pattern, where wrapper overhead is most visible) and as one batch;
- filtered recall@10 with 1% and 10% of the rows readable: through `HNSWIndex` with the filter in
  the graph and efSearch from `ef_for_selectivity`, through raw faiss with the same selector and
  efSearch, and through `ExactIndex` over the pre-gathered readable rows (the planner's choice for
  small readable sets).

Prints a Markdown table and writes JSON to benchmarks/out/hnsw.json (or --json).

    python benchmarks/bench_hnsw.py --n 100000
    nice -n 10 python benchmarks/bench_hnsw.py            # 1M: the build takes ~13 CPU-minutes
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import faiss
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citadel.index.exact import ExactIndex  # noqa: E402
from citadel.index.hnsw import HNSWIndex, ef_for_selectivity  # noqa: E402

OUT_DIR = ROOT / "benchmarks" / "out"
DIM = 384
K = 10
NUM_CLUSTERS = 1000
CLUSTER_SPREAD = 0.5  # per-dimension noise around a centre: points sit at cosine ~0.9 to it
GENERATION_BLOCK = 100_000  # rows generated (and normalised) at a time, to bound temporaries
GROUND_TRUTH_BLOCK = 100_000  # database rows scored per block when computing exact top-k
SELECTIVITIES = (0.01, 0.1)
DATA_SEED, QUERY_SEED, FILTER_SEED = 1234, 5678, 91011


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- data ---------------------------------------------------------------------------------------


def clustered_vectors(count: int, seed: int, centres: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((count, DIM), dtype=np.float32)
    for start in range(0, count, GENERATION_BLOCK):
        stop = min(start + GENERATION_BLOCK, count)
        block = centres[rng.integers(0, len(centres), stop - start)]
        block += CLUSTER_SPREAD * rng.standard_normal(block.shape, dtype=np.float32)
        out[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def cached_array(path: Path, make) -> np.ndarray:
    if path.exists():
        return np.load(path)
    array = make()
    np.save(path, array)
    return array


def exact_ground_truth(queries: np.ndarray, rows: np.ndarray, row_ids: np.ndarray) -> np.ndarray:
    """Exact top-K ids by inner product, scanning the rows in blocks and merging running top-K."""
    best_scores = np.full((len(queries), K), -np.inf, dtype=np.float32)
    best_ids = np.full((len(queries), K), -1, dtype=np.int64)
    for start in range(0, len(rows), GROUND_TRUTH_BLOCK):
        block_scores = queries @ rows[start : start + GROUND_TRUTH_BLOCK].T
        block_ids = np.broadcast_to(row_ids[start : start + GROUND_TRUTH_BLOCK], block_scores.shape)
        merged_scores = np.concatenate([best_scores, block_scores], axis=1)
        merged_ids = np.concatenate([best_ids, block_ids], axis=1)
        top = np.argpartition(-merged_scores, K - 1, axis=1)[:, :K]
        best_scores = np.take_along_axis(merged_scores, top, axis=1)
        best_ids = np.take_along_axis(merged_ids, top, axis=1)
    order = np.argsort(-best_scores, axis=1)
    return np.take_along_axis(best_ids, order, axis=1)


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    hits = [len(set(f[f >= 0].tolist()) & set(t[t >= 0].tolist())) for f, t in zip(found, truth)]
    return float(np.sum(hits) / np.sum(truth >= 0))


# -- timing -------------------------------------------------------------------------------------


def per_query(search, queries: np.ndarray) -> tuple[np.ndarray, float]:
    """Run `search` one query per call; return ids and queries per CPU-second."""
    ids = np.empty((len(queries), K), dtype=np.int64)
    started = time.process_time()
    for row in range(len(queries)):
        ids[row] = search(queries[row : row + 1])[1][0]
    return ids, len(queries) / max(time.process_time() - started, 1e-9)


def batched(search, queries: np.ndarray) -> tuple[np.ndarray, float]:
    started = time.process_time()
    ids = search(queries)[1]
    return ids, len(queries) / max(time.process_time() - started, 1e-9)


# -- runs ---------------------------------------------------------------------------------------


def build_or_load(vectors: np.ndarray, args) -> tuple[HNSWIndex, float | None]:
    cache = OUT_DIR / f"hnsw_n{len(vectors)}_m{args.m}_efc{args.ef_construction}"
    build_cpu_s = None
    if not (cache / "index.json").exists():
        log(f"building HNSW (M={args.m}, efConstruction={args.ef_construction}) on {len(vectors)} vectors "
            f"with {args.build_threads} threads")
        started_cpu, started_wall = time.process_time(), time.time()
        index = HNSWIndex(DIM, m=args.m, ef_construction=args.ef_construction, num_threads=args.build_threads)
        index.add(vectors, np.arange(len(vectors), dtype=np.int64))
        build_cpu_s = time.process_time() - started_cpu
        log(f"built in {time.time() - started_wall:.0f} s wall, {build_cpu_s:.0f} CPU-s; saving to {cache}")
        index.save(cache)
        del index
    # Queries are timed on one thread, for the wrapper and raw faiss alike.
    return HNSWIndex.load(cache, num_threads=1, ef_search=args.ef), build_cpu_s


def unfiltered_rows(index: HNSWIndex, queries: np.ndarray, truth: np.ndarray, ef: int) -> list[dict]:
    raw = index.faiss_index
    raw.hnsw.efSearch = ef

    def raw_search(q):
        return raw.search(q, K)

    def citadel_search(q):
        return index.search(q, K, ef_search=ef)

    rows = []
    for path, search in (("raw faiss", raw_search), ("Citadel HNSWIndex", citadel_search)):
        single_ids, single_qps = per_query(search, queries)
        batch_ids, batch_qps = batched(search, queries)
        rows.append({"path": path, "readable": "100%", "ef_search": ef,
                     "recall_at_10": recall_at_k(single_ids, truth),
                     "qps_cpu_single": single_qps, "qps_cpu_batch": batch_qps})
    raw_row, citadel_row = rows
    for mode in ("single", "batch"):
        citadel_row[f"overhead_{mode}"] = raw_row[f"qps_cpu_{mode}"] / citadel_row[f"qps_cpu_{mode}"] - 1
    return rows


def filtered_rows(index: HNSWIndex, vectors: np.ndarray, queries: np.ndarray, args) -> list[dict]:
    rows = []
    n = len(vectors)
    for fraction in SELECTIVITIES:
        rng = np.random.default_rng(FILTER_SEED + int(fraction * 1000))
        allowed = np.sort(rng.choice(n, int(n * fraction), replace=False)).astype(np.int64)
        gathered = vectors[allowed]
        truth = cached_array(
            OUT_DIR / f"gt_n{n}_q{len(queries)}_f{fraction}.npy",
            lambda: exact_ground_truth(queries, gathered, allowed),
        )
        ef = ef_for_selectivity(K, fraction, base_ef=args.ef)
        label = f"{fraction:.0%}"

        default_exact_max = index.exact_max_allowed
        policies = [("Citadel HNSWIndex (filter in graph)", 0)]
        if len(allowed) <= default_exact_max:  # the wrapper's own small-set shortcut applies too
            policies.append((f"Citadel HNSWIndex (default: exact at <= {default_exact_max} rows)",
                             default_exact_max))
        for path, exact_max in policies:
            index.exact_max_allowed = exact_max
            ids, qps = per_query(lambda q: index.search(q, K, allowed=allowed, ef_search=ef), queries)
            rows.append({"path": path, "readable": label, "ef_search": ef,
                         "recall_at_10": recall_at_k(ids, truth), "qps_cpu_single": qps})
            assert np.isin(ids[ids >= 0], allowed).all(), "HNSWIndex returned a disallowed id"
        index.exact_max_allowed = default_exact_max

        # Raw faiss with a selector built once (what the wrapper rebuilds on every call).
        bitmap = np.packbits(np.isin(np.arange(n), allowed), bitorder="little")
        selector = faiss.IDSelectorBitmap(n, faiss.swig_ptr(bitmap))
        params = faiss.SearchParametersHNSW(sel=selector, efSearch=ef)
        ids, qps = per_query(lambda q: index.faiss_index.search(q, K, params=params), queries)
        rows.append({"path": "raw faiss (prebuilt selector)", "readable": label, "ef_search": ef,
                     "recall_at_10": recall_at_k(ids, truth), "qps_cpu_single": qps})

        exact = ExactIndex(DIM)  # the planner caches the gathered readable rows per ACL scope
        exact.add(gathered, allowed)
        ids, qps = per_query(lambda q: exact.search(q, K), queries)
        rows.append({"path": "Citadel ExactIndex (gathered subset)", "readable": label, "ef_search": None,
                     "recall_at_10": recall_at_k(ids, truth), "qps_cpu_single": qps})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "| path | readable | efSearch | recall@10 | queries/CPU-s (1 per call) | queries/CPU-s (batch) | overhead vs raw (1 per call / batch) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        batch = f"{row['qps_cpu_batch']:,.0f}" if "qps_cpu_batch" in row else ""
        overhead = (f"{row['overhead_single']:+.1%} / {row['overhead_batch']:+.1%}"
                    if "overhead_single" in row else "")
        lines.append(f"| {row['path']} | {row['readable']} | {row['ef_search'] or '-'} | "
                     f"{row['recall_at_10']:.3f} | {row['qps_cpu_single']:,.0f} | {batch} | {overhead} |")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000, help="database vectors")
    parser.add_argument("--queries", type=int, default=1000, help="query vectors")
    parser.add_argument("--ef", type=int, default=64, help="efSearch for the unfiltered comparison")
    parser.add_argument("--m", type=int, default=32)
    parser.add_argument("--ef-construction", type=int, default=200)
    parser.add_argument("--build-threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, default=OUT_DIR / "hnsw.json")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    centres = np.random.default_rng(DATA_SEED - 1).standard_normal((NUM_CLUSTERS, DIM), dtype=np.float32)
    log(f"vectors: n={args.n}, queries={args.queries}")
    vectors = cached_array(OUT_DIR / f"vectors_n{args.n}.npy", lambda: clustered_vectors(args.n, DATA_SEED, centres))
    queries = cached_array(OUT_DIR / f"queries_q{args.queries}.npy",
                           lambda: clustered_vectors(args.queries, QUERY_SEED, centres))
    log("exact ground truth (unfiltered)")
    truth = cached_array(OUT_DIR / f"gt_n{args.n}_q{args.queries}.npy",
                         lambda: exact_ground_truth(queries, vectors, np.arange(args.n, dtype=np.int64)))
    index, build_cpu_s = build_or_load(vectors, args)
    log("timing unfiltered search")
    rows = unfiltered_rows(index, queries, truth, args.ef)
    log("timing filtered search")
    rows += filtered_rows(index, vectors, queries, args)
    table = markdown(rows)
    print(f"\nHNSW M={args.m}, efConstruction={args.ef_construction}, n={args.n:,}, dim={DIM}, "
          f"{args.queries} queries, k={K}, 1 query thread\n")
    print(table)
    result = {"n": args.n, "dim": DIM, "queries": args.queries, "k": K, "m": args.m,
              "ef_construction": args.ef_construction, "ef_search": args.ef,
              "build_cpu_seconds": build_cpu_s, "faiss_version": faiss.__version__, "rows": rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
