"""Re-embedding a tenant after an embedding-model change (DESIGN.md §6: a new model, a new index).

Vectors of two models are not comparable, so a segment never mixes them and a stored vector is never
carried into a segment built for another model (`citadel.ingest.steps.build_tenant_segment` refuses). When
the configured embedder differs (model id or dimension) from the published manifest's, every live row
of the tenant is embedded again from its stored context header and text, and the rows become a new
base segment through the compaction's build, verify and publish steps (citadel.segments.build,
citadel.ingest.steps): the pointer switch publishes it atomically, and until then the old segment stays
published (and the retriever refuses to search it with the new model's query vectors).

The job is resumable: vectors land in a memory-mapped `vectors.npy` under `<tenant>/.reembed/`, and
after every batch `progress.json` records how many rows are done and what they belong to (the source
segment, a digest of the live rows' chunk ids and content hashes, the model id and dimension). A run
that finds matching progress continues from the last finished batch; any mismatch starts over. The
work directory goes with the publish (pruning drops every directory no pointer names).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from citadel.catalog.base import Publisher
from citadel.config import IndexConfig
from citadel.embedding.base import Embedder
from citadel.errors import NotFound
from citadel.segments.build import SegmentSpec, build_segment, choose_tier, read_chunk_table
from citadel.segments.compaction import RebuildReason, live_mask
from citadel.segments.layout import CHUNKS, stack_of, tenant_root
from citadel.segments.manifest import SegmentKind, read_manifest
from citadel.segments.tiering import UNKNOWN_TRAFFIC
from citadel.ingest.steps import BuiltSegment, embed_checked, live_versions, publish_built, verify_built
from citadel.types import embed_text_for

WORK_DIR = ".reembed"
PROGRESS = "progress.json"
WORK_VECTORS = "vectors.npy"
STAGE = "reembed"

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class ReembedOutcome:
    built: BuiltSegment
    rows: int
    resumed_from: int  # rows a crashed run had already embedded (0: a fresh start)
    previous_model: str


def published_models(root: Path, published: str | None) -> set[tuple[str, int]]:
    """(model id, dim) of every segment the published pointer serves (empty when nothing is)."""
    if published is None:
        return set()
    return {(m.model_id, m.dim) for m in (read_manifest(root / s) for s in stack_of(root, published))}


def needs_reembed(partitions_dir: Path, tenant_id: str, published: str | None, model_id: str, dim: int) -> bool:
    """Whether the published segments were embedded by another model (or dimension) than this one."""
    models = published_models(tenant_root(partitions_dir, tenant_id), published)
    return bool(models) and models != {(model_id, dim)}


def live_rows(root: Path, published: str, live: Mapping[str, int]) -> pa.Table:
    """The published stack's rows of live document versions, without their vectors."""
    table = pa.concat_tables([read_chunk_table(root / s / CHUNKS) for s in stack_of(root, published)])
    mask = live_mask(table.column("document_id").to_pylist(), table.column("version").to_pylist(), live)
    return table.filter(pa.array(mask))


def reembed_tenant(catalog: Publisher, partitions_dir: Path, tenant_id: str, embedder: Embedder,
                   index_config: IndexConfig, batch_size: int, job_id: str,
                   progress: Progress | None = None) -> ReembedOutcome:
    """Embed every live row of the tenant with `embedder` and publish them as a new base segment.

    Call it holding the tenant lock (citadel.ingest.steps.tenant_lock)."""
    progress = progress or (lambda stage, done, total: None)
    started = time.perf_counter()
    root = tenant_root(partitions_dir, tenant_id)
    previous = catalog.published_segment(tenant_id)
    if previous is None:
        raise NotFound(f"tenant {tenant_id!r} has nothing published to re-embed")
    previous_model = ", ".join(sorted(m for m, _ in published_models(root, previous)))
    table = live_rows(root, previous, live_versions(catalog, tenant_id, set()))
    texts = [embed_text_for(h, t) for h, t in zip(table.column("context_header").to_pylist(),
                                                   table.column("text").to_pylist())]
    identity = {"source": previous, "rows": table.num_rows, "rows_digest": _rows_digest(table),
                "model_id": embedder.model_id, "dim": int(embedder.dim)}
    vectors, resumed_from = embed_resumable(root / WORK_DIR, identity, texts, embedder, batch_size, progress)
    # A re-embedding keeps the tenant's tier unless its size says otherwise (traffic moves it at a publish).
    current_tier = read_manifest(root / stack_of(root, previous)[0]).tier
    tier = choose_tier(tenant_id, table.num_rows, index_config, UNKNOWN_TRAFFIC.in_tier(current_tier))
    path = build_segment(root, SegmentSpec(tenant_id, tier, embedder.model_id, embedder.dim), table, vectors,
                         index_config)
    built = BuiltSegment(tenant_id, path, tier, table.num_rows, 0, previous, time.perf_counter() - started,
                         SegmentKind.BASE, RebuildReason.MODEL_CHANGE)
    try:
        verify_built(built)
        publish_built(catalog, partitions_dir, built, [], job_id)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)  # the embedded vectors stay in the work directory
        raise
    shutil.rmtree(root / WORK_DIR, ignore_errors=True)
    return ReembedOutcome(built, table.num_rows, resumed_from, previous_model)


def embed_resumable(work: Path, identity: dict, texts: Sequence[str], embedder: Embedder, batch_size: int,
                    progress: Progress) -> tuple[np.ndarray, int]:
    """Vectors of `texts`, continuing a crashed run with the same `identity` from its last finished
    batch. Returns (vectors, rows found already embedded)."""
    total, dim = len(texts), int(identity["dim"])
    if total == 0:
        return np.zeros((0, dim), dtype=np.float32), 0
    work.mkdir(parents=True, exist_ok=True)
    done = _resume_point(work, identity)
    vectors = _open_vectors(work, total, dim) if done else None
    if vectors is None:  # a fresh start (or a damaged work file): nothing is taken from before
        done = 0
        vectors = np.lib.format.open_memmap(work / WORK_VECTORS, mode="w+", dtype=np.float32, shape=(total, dim))
        _record_progress(work, identity, 0)
    resumed_from = done
    progress(STAGE, done, total)
    for start in range(done, total, max(1, batch_size)):
        batch = list(texts[start : start + batch_size])
        vectors[start : start + len(batch)] = embed_checked(embedder, batch)
        vectors.flush()  # the vectors are on disk before progress claims them
        _record_progress(work, identity, start + len(batch))
        progress(STAGE, start + len(batch), total)
    result = np.array(vectors)
    del vectors
    return result, resumed_from


def _open_vectors(work: Path, total: int, dim: int) -> np.memmap | None:
    try:
        vectors = np.lib.format.open_memmap(work / WORK_VECTORS, mode="r+")
    except (OSError, ValueError):
        return None
    return vectors if vectors.shape == (total, dim) and vectors.dtype == np.float32 else None


def _resume_point(work: Path, identity: dict) -> int:
    """Rows a previous run of the same job finished, or 0 (no run, another job, a damaged file)."""
    try:
        recorded = json.loads((work / PROGRESS).read_text())
    except (OSError, ValueError):
        return 0
    if not isinstance(recorded, dict) or recorded.get("identity") != identity or not (work / WORK_VECTORS).exists():
        return 0
    done = recorded.get("done")
    return done if isinstance(done, int) and 0 <= done <= identity["rows"] else 0


def _record_progress(work: Path, identity: dict, done: int) -> None:
    """Written to a temporary file and renamed, so a crash leaves the previous record whole."""
    tmp = work / f"{PROGRESS}.tmp"
    tmp.write_text(json.dumps({"identity": identity, "done": done, "updated_at": time.time()}))
    os.replace(tmp, work / PROGRESS)


def _rows_digest(table: pa.Table) -> str:
    """Which rows, in which order: a withdrawal between a crash and the resume changes it."""
    digest = hashlib.sha256()
    for chunk_id, chunk_hash in zip(table.column("chunk_id").to_pylist(), table.column("content_hash").to_pylist()):
        digest.update(f"{chunk_id}\x00{chunk_hash}\x00".encode("utf-8"))
    return digest.hexdigest()
