"""Writing segments: the chunk table's schema, the tier a tenant's size picks, and building a base
segment (rows, vectors, ANN index, BM25, manifest) or a delta stacked on one.

Segments are written under a temporary name and renamed when complete, so a crash never leaves a
partial segment that a pointer could name; the catalog's pointer switch publishes them.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from citadel.config import IndexConfig
from citadel.errors import VerificationFailed
from citadel.index.bm25 import BM25Index
from citadel.index.factory import make_vector_index
from citadel.segments.layout import BM25_DIR, CHUNKS, TMP_PREFIX, TOMBSTONES, VECTOR_DIR, VECTORS
from citadel.segments.manifest import (
    EXACT_BACKEND,
    TIER_BACKEND,
    Manifest,
    SegmentKind,
    documents_of,
    file_sha256,
    write_manifest,
)
from citadel.segments.tiering import UNKNOWN_TRAFFIC, TierStanding, decide_tier
from citadel.types import GOVERNANCE_FIELDS, Chunk

CHUNK_SCHEMA = pa.schema(
    [
        ("chunk_id", pa.string()),
        ("document_id", pa.string()),
        ("version", pa.int32()),
        ("ordinal", pa.int32()),
        ("title", pa.string()),
        ("heading", pa.string()),
        ("page", pa.int32()),
        ("text", pa.string()),
        ("context_header", pa.string()),
        ("content_hash", pa.string()),
        ("source", pa.string()),
        ("section_index", pa.int32()),
        # The version's governance as the catalog stated it at ingestion (citadel.types.Governance).
        ("policy_id", pa.string()),
        ("policy_revision", pa.string()),
        ("sensitivity", pa.string()),
        ("retention_class", pa.string()),
    ]
)
# The keyword each backend takes for its build thread count.
_BUILD_THREADS_PARAM = {"hnsw": "num_threads", "diskann": "build_threads"}


@dataclass(frozen=True)
class SegmentSpec:
    """What every row of a new segment shares: its tenant, tier and embedding model."""

    tenant_id: str
    tier: str
    model_id: str
    dim: int


def choose_tier(tenant_id: str, chunk_count: int, config: IndexConfig, standing: TierStanding | None = None) -> str:
    """tiny → exact, hot → HNSW, cold → DiskANN, by size and traffic with hysteresis and a minimum stay
    (citadel.segments.tiering), unless overridden per tenant. Without a `standing` traffic moves nothing."""
    return decide_tier(tenant_id, chunk_count, standing or UNKNOWN_TRAFFIC, config)


def chunks_to_table(chunks: Sequence[Chunk]) -> pa.Table:
    return pa.Table.from_pydict(
        {
            "chunk_id": [c.chunk_id for c in chunks],
            "document_id": [c.document_id for c in chunks],
            "version": [c.version for c in chunks],
            "ordinal": [c.ordinal for c in chunks],
            "title": [c.title for c in chunks],
            "heading": [c.heading for c in chunks],
            "page": [c.page for c in chunks],
            "text": [c.text for c in chunks],
            "context_header": [c.context_header for c in chunks],
            "content_hash": [c.content_hash for c in chunks],
            "source": [c.source for c in chunks],
            "section_index": [c.section_index for c in chunks],
            **{name: [getattr(c.governance, name) for c in chunks] for name in GOVERNANCE_FIELDS},
        },
        schema=CHUNK_SCHEMA,
    )


def conform_chunk_table(table: pa.Table) -> pa.Table:
    """A chunk table in today's schema: a segment written before a column existed (the governance
    columns) gets it as nulls, so its rows concatenate with new ones and read like them."""
    if table.schema.equals(CHUNK_SCHEMA):
        return table
    for name in CHUNK_SCHEMA.names:
        if name not in table.column_names:
            table = table.append_column(CHUNK_SCHEMA.field(name), pa.nulls(table.num_rows, CHUNK_SCHEMA.field(name).type))
    return table.select(CHUNK_SCHEMA.names).cast(CHUNK_SCHEMA)


def read_chunk_table(path: Path) -> pa.Table:
    """A segment's chunk table file, in today's schema (`conform_chunk_table`)."""
    return conform_chunk_table(pq.read_table(path))


def bm25_texts(table: pa.Table) -> list[str]:
    """BM25 sees the heading path and title too, like the embedder sees the context header."""
    headers = table.column("context_header").to_pylist()
    texts = table.column("text").to_pylist()
    return [f"{h}\n{t}" for h, t in zip(headers, texts)]


def _index_params(backend: str, config: IndexConfig, build_threads: int | None = None) -> dict:
    params: dict = {}
    if backend == "hnsw":
        params = {"m": config.hnsw_m, "ef_construction": config.hnsw_ef_construction,
                  "ef_search": config.hnsw_ef_search, "storage": config.hnsw_storage}
    if build_threads and backend in _BUILD_THREADS_PARAM:
        params[_BUILD_THREADS_PARAM[backend]] = build_threads
    return params


def build_segment(root: Path, spec: SegmentSpec, table: pa.Table, vectors: np.ndarray,
                  config: IndexConfig, build_threads: int | None = None) -> Path:
    """Write a complete base segment under `root` and return its final directory.

    `build_threads` caps the index build's threads (a Ray build task owns only its CPUs); None keeps
    each backend's default.
    """
    _check_rows(table, vectors)
    backend = TIER_BACKEND[spec.tier]

    def write(directory: Path) -> None:
        _write_rows(directory, table, vectors)
        if backend != EXACT_BACKEND and table.num_rows:
            index = make_vector_index(backend, spec.dim, **_index_params(backend, config, build_threads))
            index.add(vectors, np.arange(table.num_rows, dtype=np.int64))
            index.save(directory / VECTOR_DIR)
        write_manifest(directory, _manifest(directory, spec, table, (CHUNKS, VECTORS), SegmentKind.BASE, backend))

    return write_atomically(root, write)


def build_delta_segment(root: Path, spec: SegmentSpec, base: str, base_rows: int, tombstones: np.ndarray,
                        table: pa.Table, vectors: np.ndarray) -> Path:
    """Write a delta segment stacked on the base segment `base`: the rows added since the base was
    built (searched exactly, no graph to build) and the base rows that are no longer live."""
    _check_rows(table, vectors)

    def write(directory: Path) -> None:
        _write_table_and_vectors(directory, table, vectors)
        # The delta's BM25 index is the base's plus the delta rows (under their partition row ids), so
        # one index with one set of term statistics serves the whole stack.
        bm25 = BM25Index.extending(root / base / BM25_DIR, bm25_texts(table),
                                   base_rows + np.arange(table.num_rows, dtype=np.int64))
        bm25.save(directory / BM25_DIR)
        np.save(directory / TOMBSTONES, np.asarray(tombstones, dtype=np.int64))
        manifest = _manifest(directory, spec, table, (CHUNKS, VECTORS, TOMBSTONES), SegmentKind.DELTA,
                             EXACT_BACKEND, base=base, base_rows=base_rows, tombstones=int(len(tombstones)))
        write_manifest(directory, manifest)

    return write_atomically(root, write)


def _check_rows(table: pa.Table, vectors: np.ndarray) -> None:
    if table.num_rows != len(vectors):
        raise VerificationFailed(f"{table.num_rows} chunks but {len(vectors)} vectors")


def write_atomically(root: Path, write: Callable[[Path], None]) -> Path:
    """Run `write` in a temporary directory and rename it into place only once it is complete, so a
    crash leaves at most a `.tmp-` directory (pruned later), never a partial segment."""
    segment_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    tmp = root / f"{TMP_PREFIX}{segment_id}"
    tmp.mkdir(parents=True)
    try:
        write(tmp)
        final = root / segment_id
        os.replace(tmp, final)
        return final
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_table_and_vectors(directory: Path, table: pa.Table, vectors: np.ndarray) -> None:
    pq.write_table(table, directory / CHUNKS)
    np.save(directory / VECTORS, np.ascontiguousarray(vectors, dtype=np.float32))


def _write_rows(directory: Path, table: pa.Table, vectors: np.ndarray) -> None:
    """The chunk table, the vectors and a BM25 index of just these rows."""
    _write_table_and_vectors(directory, table, vectors)
    bm25 = BM25Index()
    bm25.add(bm25_texts(table), np.arange(table.num_rows, dtype=np.int64))
    bm25.save(directory / BM25_DIR)


def _manifest(directory: Path, spec: SegmentSpec, table: pa.Table, checksummed: Sequence[str],
              kind: SegmentKind, backend: str, **delta) -> Manifest:
    """The manifest of the files just written; checksums are taken from the files on disk."""
    pairs = list(zip(table.column("document_id").to_pylist(), table.column("version").to_pylist()))
    return Manifest(tenant_id=spec.tenant_id, tier=spec.tier, model_id=spec.model_id, dim=spec.dim,
                    chunks=table.num_rows, documents=documents_of(pairs),
                    checksums={name: file_sha256(directory / name) for name in checksummed},
                    created_at=time.time(), kind=kind, backend=backend, **delta)
