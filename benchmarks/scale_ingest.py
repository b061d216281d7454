"""Scale run of the Ray Data ingestion pipeline: ≥1M synthetic chunks over ≥1,000 tenants,
with hot (HNSW), cold (DiskANN) and tiny (exact) tenants all present, on a local Ray instance.

Vectors come from the fast deterministic hash embedder (same 384 dimensions as MiniLM): the real model
manages ~50 passages/s on this CPU, ~6 hours for 1M; `citadel bench ingest` measures the model's rate.
Hot and cold tenants are sized so their index builds fit this machine (faiss HNSW at 1M is ~13
CPU-minutes, DiskANN at 200k ~14): by default two hot tenants of 60k chunks and two cold of 30k (cold
by tier override, as a traffic-based tiering would put them), the other 996 tiny.

Reports peak memory of the whole process tree (driver + Ray; RSS sums double-count the shared object
store, PSS does not), disk per chunk, wall time per phase and build time per tier; writes JSON to
benchmarks/out/scale_ingest.json (or --out).

    nice -n 10 timeout 40m python benchmarks/scale_ingest.py
    nice -n 10 python benchmarks/scale_ingest.py --tenants 200 --chunks 100000 --large 12000,12000,6000,6000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LARGE = "60000,60000,30000,30000"
HOT_TENANTS = 2  # the first large tenants are hot, the rest cold
SAMPLE_EVERY_S = 2.0
GIB = 1024**3


class TreeMemory:
    """Samples the memory of this process and all its descendants (the Ray head and workers)."""

    def __init__(self):
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_driver_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        me = psutil.Process()
        while not self._stop.wait(SAMPLE_EVERY_S):
            rss = pss = 0
            for process in [me] + me.children(recursive=True):
                try:
                    info = process.memory_full_info()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                rss += info.rss
                pss += getattr(info, "pss", info.rss)
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_pss = max(self.peak_pss, pss)
            self.peak_driver_rss = max(self.peak_driver_rss, me.memory_info().rss)


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def log(message: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def synthesize(args, corpus: Path):
    from citadel.ingest.synth import SynthSpec, generate

    spec = SynthSpec(tenants=args.tenants, chunks=args.chunks, seed=args.seed, large=args.large,
                     small_cap=args.small_cap)
    started = time.perf_counter()
    shutil.rmtree(corpus, ignore_errors=True)
    result = generate(spec, corpus)
    return result, time.perf_counter() - started


def configure(home: Path, large_tenants: list[str], args):
    from citadel.config import load_config

    config = load_config(environ={"CITADEL_HOME": str(home), "CITADEL_EMBEDDING__BACKEND": "hash"})
    config.index.tier_overrides = {t: ("hot" if rank < HOT_TENANTS else "cold") for rank, t in enumerate(large_tenants)}
    settings = config.ingest_pipeline
    settings.embed_dtype = "float16"
    settings.embed_actors = args.embed_actors
    settings.embed_batch_size = args.batch
    settings.parse_batch_documents = args.parse_batch
    settings.ray_num_cpus = args.ray_cpus
    settings.ray_object_store_mb = args.object_store_mb
    return config


def tier_disk(config, tenants: list[dict]) -> dict[str, dict[str, float]]:
    """Bytes on disk per chunk, per tier (segments only; the catalog is counted separately)."""
    tiers: dict[str, dict[str, float]] = {}
    for row in tenants:
        if not row["segment_id"]:
            continue
        entry = tiers.setdefault(row["tier"], {"tenants": 0, "chunks": 0, "bytes": 0})
        entry["tenants"] += 1
        entry["chunks"] += row["published_chunks"]
        entry["bytes"] += directory_bytes(config.partitions_dir / row["tenant_id"] / row["segment_id"])
    for entry in tiers.values():
        entry["bytes_per_chunk"] = round(entry["bytes"] / max(1, entry["chunks"]), 1)
    return tiers


def progress_logger():
    last = {"t": 0.0}

    def update(stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last["t"] > 30:
            last["t"] = now
            log(f"{stage} {done}/{total}")

    return update


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--large", default=DEFAULT_LARGE, help="chunk counts of the hot then cold tenants")
    parser.add_argument("--small-cap", type=int, default=15_000, help="the other tenants stay tiny (< 20k)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=REPO / "var" / "scale")
    parser.add_argument("--reuse-corpus", action="store_true", help="keep an existing synthetic corpus")
    parser.add_argument("--embed-actors", type=int, default=2)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--parse-batch", type=int, default=16)
    parser.add_argument("--ray-cpus", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--object-store-mb", type=int, default=2048)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "scale_ingest.json")
    args = parser.parse_args()
    args.large = tuple(int(x) for x in args.large.split(",") if x)

    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.ingest.synth import MANIFEST_NAME, SynthResult
    from cluster.ray_local import local_ray
    from indexing.records import records_from_manifest

    corpus, home = args.workdir / "corpus", args.workdir / "home"
    if args.reuse_corpus and (corpus / MANIFEST_NAME).exists():
        synth_s = 0.0
        import pyarrow.parquet as pq

        manifest = pq.read_table(corpus / MANIFEST_NAME).select(["tenant_id", "chunks"]).to_pylist()
        sizes: dict[str, int] = {}
        for row in manifest:
            sizes[row["tenant_id"]] = sizes.get(row["tenant_id"], 0) + row["chunks"]
        large = sorted(sizes, key=lambda t: -sizes[t])[: len(args.large)]
        synth = SynthResult(corpus, corpus / MANIFEST_NAME, sizes, len(manifest), directory_bytes(corpus), large)
    else:
        log(f"synthesizing {args.chunks:,} chunks over {args.tenants:,} tenants")
        synth, synth_s = synthesize(args, corpus)
    log(f"corpus: {synth.documents:,} documents, {synth.bytes_written / GIB:.2f} GiB, {synth_s:.0f}s")

    shutil.rmtree(home, ignore_errors=True)
    config = configure(home, synth.large_tenants, args)
    records = records_from_manifest(synth.manifest)
    catalog = SQLiteCatalog(config.catalog_path)
    started = time.perf_counter()
    with TreeMemory() as memory:
        with local_ray(config.ingest_pipeline):
            from indexing.pipeline import RayIngestPipeline

            ray_up = time.perf_counter() - started
            log(f"ray up in {ray_up:.1f}s; ingesting {records.num_rows:,} documents")
            report = RayIngestPipeline(catalog, config, progress=progress_logger()).run(records).to_dict()
    total_s = time.perf_counter() - started
    tenants = catalog.list_tenants()
    partitions_bytes = directory_bytes(config.partitions_dir)
    catalog_bytes = sum(p.stat().st_size for p in home.glob("catalog.sqlite*"))
    published = sum(row["published_chunks"] for row in tenants)
    result = {
        "embedder": "hash (citadel/hash-embedder-v1, 384-d; deterministic stand-in for MiniLM)",
        "machine": {"cpus": os.cpu_count(), "load_avg_at_end": os.getloadavg()},
        "corpus": {"tenants": len(synth.tenant_chunks), "chunks": sum(synth.tenant_chunks.values()),
                   "documents": synth.documents, "bytes": synth.bytes_written, "synth_s": round(synth_s, 1),
                   "large_tenants": {t: synth.tenant_chunks[t] for t in synth.large_tenants}},
        "job": {k: report[k] for k in ("status", "documents", "published", "failed", "chunks", "partition_chunks",
                                       "seconds", "busy_seconds", "chunks_per_s", "build_by_tier", "plan")},
        "published_chunks": published,
        "tiers": {tier: sum(1 for row in tenants if row["tier"] == tier) for tier in ("hot", "cold", "tiny")},
        "wall_s": {"ray_start": round(ray_up, 1), "total_with_ray": round(total_s, 1)},
        "peak_memory_gib": {"tree_rss_sum": round(memory.peak_rss / GIB, 2),
                            "tree_pss_sum": round(memory.peak_pss / GIB, 2),
                            "driver_rss": round(memory.peak_driver_rss / GIB, 2)},
        "disk": {"partitions_bytes": partitions_bytes, "catalog_bytes": catalog_bytes,
                 "bytes_per_chunk": round((partitions_bytes + catalog_bytes) / max(1, published), 1),
                 "by_tier": tier_disk(config, tenants)},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
