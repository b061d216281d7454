"""`citadel bench ingest`: chunks/s of the Ray Data pipeline beside a raw encode() loop of the same
model on the same texts, in one run (goal: raydata ≥ 0.85× raw_encode).

Both sides embed the chunks of one synthetic corpus (`citadel.ingest.synth`). `raw_encode` is a plain loop of
`embed_passages` over batches in this process, timed after the model is loaded. `raydata` is the whole
pipeline (parse, chunk, embed on the actor pool, stage, build, verify, publish) on a local Ray instance
already started; its `seconds` leave out the embed actors' model loading, as the raw loop does, and
`wall_s` keeps everything for the record.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from citadel.catalog.sqlite import SQLiteCatalog
from citadel.config import CitadelConfig
from citadel.embedding.factory import make_embedder
from citadel.ingest.sources import AclSpec, SourceFile
from citadel.ingest.steps import PreparedDocument, VersionSnapshot, prepare_document
from citadel.ingest.synth import SynthSpec, generate

GOAL_RATIO = 0.85
WARMUP_TEXTS = 8


def _row(mode: str, chunks: int, seconds: float, **extra: float) -> dict:
    rate = chunks / seconds if seconds > 0 else 0.0
    return {"mode": mode, "chunks": chunks, "seconds": round(seconds, 3), "chunks_per_s": round(rate, 2),
            **{k: round(v, 3) for k, v in extra.items()}}


def corpus_texts(manifest: Path, config: CitadelConfig) -> list[str]:
    """The exact texts the pipeline embeds: every document parsed and chunked in-process."""
    texts = []
    base = manifest.parent
    for record in pq.read_table(manifest).to_pylist():
        path = base / record["source"]
        result = prepare_document(record["tenant_id"], SourceFile(path, record["document_id"], str(path)),
                                  AclSpec.from_groups(record["groups"]), config, VersionSnapshot({}))
        if isinstance(result, PreparedDocument):
            texts.extend(chunk.embed_text for chunk in result.chunks)
    return texts


def raw_encode(texts: list[str], config: CitadelConfig) -> dict:
    """One process, the machine's cores as torch threads, batches of the pipeline's batch size."""
    embedder = make_embedder(config.embedding, torch_threads=os.cpu_count() or 1)
    embedder.embed_passages(texts[:WARMUP_TEXTS])
    batch = config.ingest_pipeline.embed_batch_size
    started = time.perf_counter()
    for start in range(0, len(texts), batch):
        embedder.embed_passages(texts[start : start + batch])
    return _row("raw_encode", len(texts), time.perf_counter() - started)


def raydata(manifest: Path, config: CitadelConfig) -> dict:
    """The whole pipeline into a fresh home, on the Ray instance this process is connected to."""
    from indexing.pipeline import RayIngestPipeline
    from indexing.records import records_from_manifest

    catalog = SQLiteCatalog(config.catalog_path)
    try:
        started = time.perf_counter()
        report = RayIngestPipeline(catalog, config).run(records_from_manifest(manifest))
        wall = time.perf_counter() - started
    finally:
        catalog.close()
    summary = report.to_dict()
    load = summary["busy_seconds"].get("model_load", 0.0) / max(1, config.ingest_pipeline.embed_actors)
    return _row("raydata", summary["chunks"], wall - load, wall_s=wall, model_load_s=load)


def bench_ingest(config: CitadelConfig, chunks: int, tenants: int = 4, workdir: Path | None = None,
                 seed: int = 0) -> dict:
    """{"rows": [raydata, raw_encode], "ratio": raydata/raw_encode, "notes": ...}."""
    from cluster.ray_local import local_ray

    with tempfile.TemporaryDirectory(prefix="citadel-bench-") as scratch:
        root = Path(workdir or scratch)
        corpus = generate(SynthSpec(tenants=min(tenants, max(1, chunks // 3)), chunks=chunks, seed=seed),
                          root / "corpus")
        texts = corpus_texts(corpus.manifest, config)
        raw = raw_encode(texts, config)
        pipeline_config = config.model_copy(deep=True)
        pipeline_config.home = root / "home"
        with local_ray(pipeline_config.ingest_pipeline):
            ray_row = raydata(corpus.manifest, pipeline_config)
    ratio = ray_row["chunks_per_s"] / raw["chunks_per_s"] if raw["chunks_per_s"] else 0.0
    notes = (f"embedder={config.embedding.backend}; {os.cpu_count()} cores; raydata seconds exclude embed-actor "
             f"model loading (wall_s includes it and Ray's task start-up); goal ratio {GOAL_RATIO}")
    return {"rows": [ray_row, raw], "ratio": round(ratio, 3), "notes": notes}
