"""Incremental publish (delta segment) against a full rebuild, for one hot (HNSW) tenant.

Builds a base of N chunks (random unit vectors, pseudo-text for BM25), then publishes M new chunks
plus a new version of a few documents in two ways, side by side in one run:

- delta: `build_tenant_segment` with the compaction policy allowing a delta (the default policy for a
  tenant this size), then `verify_built`;
- rebuild: the same publish with `force_rebuild=True` (what every publish cost before deltas).

It also times a serving replica's reload of the new pointer (a delta reuses the loaded base) and one
vector + BM25 search on each result (the delta adds an exact scan of its rows).
Prints one JSON object.

    python benchmarks/bench_delta.py --base 50000 --new 500
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citadel.config import IndexConfig  # noqa: E402
from citadel.segments.build import chunks_to_table  # noqa: E402
from citadel.segments.partition import Partition  # noqa: E402
from citadel.ingest.steps import build_tenant_segment, verify_built  # noqa: E402
from citadel.types import Chunk  # noqa: E402

DIM = 384
CHUNKS_PER_DOCUMENT = 10
WORDS = [f"w{n}" for n in range(5000)]
MODEL = "bench-random"
QUERIES = 50


def _chunks(rng: np.random.Generator, documents: range, version: int) -> list[Chunk]:
    chunks = []
    for doc in documents:
        for ordinal in range(CHUNKS_PER_DOCUMENT):
            text = " ".join(rng.choice(WORDS, 60))
            chunks.append(Chunk(chunk_id=f"t:d{doc}:v{version}:{ordinal:04d}", tenant_id="t", document_id=f"d{doc}",
                                version=version, ordinal=ordinal, title=f"Doc {doc}", heading_path=("Section",),
                                page=None, text=text, context_header=f"Doc {doc} > Section",
                                content_hash=f"{doc}-{version}-{ordinal}", source=f"d{doc}.md", section_index=0))
    return chunks


def _vectors(rng: np.random.Generator, count: int) -> np.ndarray:
    vectors = rng.standard_normal((count, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _search_ms(partition: Partition, rng: np.random.Generator) -> dict[str, float]:
    allowed = np.arange(len(partition), dtype=np.int64)[: len(partition) - 1]  # a filtered search, as in serving
    queries = _vectors(rng, QUERIES)
    started = time.perf_counter()
    for query in queries:
        partition.ann.search(query, 50, allowed=allowed, ef_search=64)
    vector_ms = (time.perf_counter() - started) * 1000 / QUERIES
    started = time.perf_counter()
    for _ in range(QUERIES):
        partition.bm25.search(" ".join(rng.choice(WORDS, 6)), 50, allowed=allowed)
    return {"vector_ms": round(vector_ms, 2), "bm25_ms": round((time.perf_counter() - started) * 1000 / QUERIES, 2)}


def run(base_chunks: int, new_chunks: int, replaced_documents: int) -> dict:
    rng = np.random.default_rng(7)
    config = IndexConfig(tier_overrides={"t": "hot"})
    work = Path(tempfile.mkdtemp(prefix="citadel-bench-delta-"))
    try:
        base_docs = base_chunks // CHUNKS_PER_DOCUMENT
        started = time.perf_counter()
        base = build_tenant_segment(work, "t", chunks_to_table(_chunks(rng, range(base_docs), 1)),
                                    _vectors(rng, base_chunks), None, {}, config, MODEL, DIM)
        base_s = time.perf_counter() - started
        new_docs = range(base_docs, base_docs + new_chunks // CHUNKS_PER_DOCUMENT)
        new = _chunks(rng, new_docs, 1) + _chunks(rng, range(replaced_documents), 2)
        table, vectors = chunks_to_table(new), _vectors(rng, len(new))
        live = {f"d{doc}": 1 for doc in range(replaced_documents, base_docs)}
        rows = {"base_chunks": base_chunks, "base_build_s": round(base_s, 2), "published_chunks": len(new)}
        served = Partition(base.path)  # what a serving replica holds when the publish lands
        loaded = {segment.directory: segment for segment in served.segments}
        for mode, force in (("delta", False), ("rebuild", True)):
            started = time.perf_counter()
            built = build_tenant_segment(work, "t", table, vectors, base.segment_id, live, config, MODEL, DIM,
                                         force_rebuild=force)
            verify_built(built)
            seconds = time.perf_counter() - started
            started = time.perf_counter()
            partition = Partition(built.path, loaded=loaded)  # the replica's reload (PartitionCache)
            reload_s = time.perf_counter() - started
            rows[mode] = {"kind": built.kind.value, "publish_s": round(seconds, 2), "replica_reload_s": round(reload_s, 2),
                          "rows": built.rows, **_search_ms(partition, rng)}
        rows["rebuild_over_delta"] = round(rows["rebuild"]["publish_s"] / rows["delta"]["publish_s"], 1)
        return rows
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=50_000, help="chunks in the base segment")
    parser.add_argument("--new", type=int, default=500, help="new chunks in the incremental publish")
    parser.add_argument("--replaced", type=int, default=5, help="documents that get a new version")
    args = parser.parse_args()
    print(json.dumps(run(args.base, args.new, args.replaced), indent=1))


if __name__ == "__main__":
    main()
