"""Per-tenant partitions: immutable segments on disk, built, verified, then published.

A segment directory holds `chunks.parquet` (one row per chunk; the row number is the id every index
uses), `vectors.npy`, `vector/` (the ANN index for hot/cold tiers; tiny tenants have none and are
searched exactly), `bm25/` (tantivy) and `manifest.json` (model id, dims, counts, checksums).
Segments are written under a temporary name and renamed when complete, so a crash never leaves a
partial segment that a pointer could name; the catalog's pointer switch publishes them.

A pointer names either a base segment or a delta segment (DESIGN.md §3): a delta holds only the rows
published since its base was built (exact search, no graph) plus `tombstones.npy`, the base rows no
longer live, and its manifest names the base. Incremental publishes write a new delta over the same
base, which costs rows-since-the-base, not the whole tenant; compaction (`citadel.stages`) rebuilds a
base when the delta or the tombstones pass their thresholds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, Mapping, Sequence, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from citadel.config import IndexConfig
from citadel.errors import EmbeddingModelMismatch, VerificationFailed
from citadel.index.base import VectorIndex
from citadel.index.bm25 import BM25Index
from citadel.index.exact import ExactIndex
from citadel.index.factory import load_vector_index, make_vector_index
from citadel.index.layered import Layer, LayeredVectorIndex
from citadel.types import Chunk, validate_tenant_id

MANIFEST = "manifest.json"
CHUNKS = "chunks.parquet"
VECTORS = "vectors.npy"
VECTOR_DIR = "vector"
BM25_DIR = "bm25"
TOMBSTONES = "tombstones.npy"
KIND_BASE = "base"
KIND_DELTA = "delta"
TMP_PREFIX = ".tmp-"
TIER_BACKEND = {"tiny": "exact", "hot": "hnsw", "cold": "diskann"}
CHECKSUM_BLOCK = 1 << 20
T = TypeVar("T")
PROBE_TOP_K = 10
PROBE_EF_SEARCH = 256  # search budget of a pre-publish probe (HNSW efSearch, DiskANN list size)

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
    ]
)


def tenant_root(partitions_dir: Path, tenant_id: str) -> Path:
    """`<partitions_dir>/<tenant>`, the one place a tenant's directory is named. The id is validated
    first, so no tenant id (`..`, `a/../b`, `/`, a NUL) can name a path outside `partitions_dir`,
    and pruning one tenant can never touch another's segments."""
    return Path(partitions_dir) / validate_tenant_id(tenant_id)


def choose_tier(tenant_id: str, chunk_count: int, config: IndexConfig) -> str:
    """tiny → exact, hot → HNSW, cold → DiskANN, by size unless overridden per tenant."""
    if tenant_id in config.tier_overrides:
        return config.tier_overrides[tenant_id]
    if chunk_count <= config.tiny_max_chunks:
        return "tiny"
    return "hot" if chunk_count <= config.hot_max_chunks else "cold"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHECKSUM_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


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
        },
        schema=CHUNK_SCHEMA,
    )


@dataclass(frozen=True)
class SegmentSpec:
    tenant_id: str
    tier: str
    model_id: str
    dim: int


# The keyword each backend takes for its build thread count.
_BUILD_THREADS_PARAM = {"hnsw": "num_threads", "diskann": "build_threads"}


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
        if backend != "exact" and table.num_rows:
            index = make_vector_index(backend, spec.dim, **_index_params(backend, config, build_threads))
            index.add(vectors, np.arange(table.num_rows, dtype=np.int64))
            index.save(directory / VECTOR_DIR)
        _write_manifest(directory, spec, table, {"kind": KIND_BASE, "backend": backend}, (CHUNKS, VECTORS))

    return _write_atomically(root, write)


def build_delta_segment(root: Path, spec: SegmentSpec, base: str, base_rows: int, tombstones: np.ndarray,
                        table: pa.Table, vectors: np.ndarray) -> Path:
    """Write a delta segment stacked on the base segment `base`: the rows added since the base was
    built (searched exactly, no graph to build) and the base rows that are no longer live."""
    _check_rows(table, vectors)

    def write(directory: Path) -> None:
        _write_table_and_vectors(directory, table, vectors)
        # The delta's BM25 index is the base's plus the delta rows (under their partition row ids), so
        # one index with one set of term statistics serves the whole stack.
        bm25 = BM25Index.extending(root / base / BM25_DIR, _bm25_texts(table),
                                   base_rows + np.arange(table.num_rows, dtype=np.int64))
        bm25.save(directory / BM25_DIR)
        np.save(directory / TOMBSTONES, np.asarray(tombstones, dtype=np.int64))
        extra = {"kind": KIND_DELTA, "backend": "exact", "base": base, "base_rows": base_rows,
                 "tombstones": int(len(tombstones))}
        _write_manifest(directory, spec, table, extra, (CHUNKS, VECTORS, TOMBSTONES))

    return _write_atomically(root, write)


def _check_rows(table: pa.Table, vectors: np.ndarray) -> None:
    if table.num_rows != len(vectors):
        raise VerificationFailed(f"{table.num_rows} chunks but {len(vectors)} vectors")


def _write_atomically(root: Path, write: Callable[[Path], None]) -> Path:
    """Run `write` in a temporary directory and rename it into place only once it is complete."""
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
    bm25.add(_bm25_texts(table), np.arange(table.num_rows, dtype=np.int64))
    bm25.save(directory / BM25_DIR)


def _write_manifest(directory: Path, spec: SegmentSpec, table: pa.Table, extra: dict,
                    checksummed: Sequence[str]) -> None:
    documents = sorted(set(zip(table.column("document_id").to_pylist(), table.column("version").to_pylist())))
    manifest = {
        "tenant_id": spec.tenant_id,
        "tier": spec.tier,
        "model_id": spec.model_id,
        "dim": spec.dim,
        "chunks": table.num_rows,
        "documents": [{"document_id": d, "version": v} for d, v in documents],
        "checksums": {name: file_sha256(directory / name) for name in checksummed},
        "created_at": time.time(),
        **extra,
    }
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1))


def read_manifest(directory: Path) -> dict:
    return json.loads((Path(directory) / MANIFEST).read_text())


def stack_of(root: Path, segment_id: str) -> list[str]:
    """The segment ids a pointer to `segment_id` needs on disk: its base first, then itself."""
    manifest = read_manifest(Path(root) / segment_id)
    return [manifest["base"], segment_id] if manifest.get("kind") == KIND_DELTA else [segment_id]


def segment_total_rows(directory: Path) -> int:
    """Rows a pointer to this segment serves, counting a delta's base."""
    manifest = read_manifest(directory)
    return int(manifest["chunks"]) + int(manifest.get("base_rows", 0))


def _bm25_texts(table: pa.Table) -> list[str]:
    """BM25 sees the heading path and title too, like the embedder sees the context header."""
    headers = table.column("context_header").to_pylist()
    texts = table.column("text").to_pylist()
    return [f"{h}\n{t}" for h, t in zip(headers, texts)]


class Segment:
    """One loaded segment directory: its chunk table, vectors, exact index, ANN index (if any), BM25."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        self.table = pq.read_table(self.directory / CHUNKS)
        self.vectors = np.load(self.directory / VECTORS, mmap_mode="r")
        self.exact = ExactIndex(self.manifest["dim"])
        if len(self.table):
            self.exact.add(np.asarray(self.vectors), np.arange(len(self.table), dtype=np.int64))
        vector_dir = self.directory / VECTOR_DIR
        self.ann: VectorIndex | None = load_vector_index(vector_dir) if vector_dir.exists() else None
        self.bm25 = BM25Index.load(self.directory / BM25_DIR)
        # Python-side row lookups, built once per segment: a delta published over a loaded base
        # reuses the base's (they cost seconds at a million rows).
        self.columns = {name: self.table.column(name).to_pylist() for name in self.table.column_names}
        self.rows_by_version = _group_rows(self.columns["document_id"], self.columns["version"])

    def __len__(self) -> int:
        return self.table.num_rows

    @property
    def is_delta(self) -> bool:
        return self.manifest.get("kind") == KIND_DELTA


def _group_rows(documents: list[str], versions: list[int]) -> dict[tuple[str, int], np.ndarray]:
    groups: dict[tuple[str, int], list[int]] = {}
    for row, key in enumerate(zip(documents, versions)):
        groups.setdefault(key, []).append(row)
    return {key: np.asarray(rows, dtype=np.int64) for key, rows in groups.items()}


class Partition:
    """What a tenant's published pointer names, loaded: one base segment, or a delta stacked on one.

    Row ids run across the stack (base rows first, then the delta's), so callers see one chunk table,
    one exact index, one ANN leg (the base's graph plus an exact scan of the delta) and one BM25 index.
    `loaded` offers segments already in memory (the previous pointer's), so publishing a delta reuses
    the loaded base instead of reading its index again.
    """

    def __init__(self, directory: Path, loaded: Mapping[Path, Segment] | None = None):
        loaded = loaded or {}
        top = loaded.get(Path(directory)) or Segment(directory)
        if top.is_delta:
            base_dir = top.directory.parent / top.manifest["base"]
            self.segments = [loaded.get(base_dir) or Segment(base_dir), top]
        else:
            self.segments = [top]
        self.directory = top.directory
        self.segment_id = self.directory.name
        self.manifest = top.manifest
        self.table = pa.concat_tables([s.table for s in self.segments]) if top.is_delta else top.table
        self._offsets = np.cumsum([0] + [len(s) for s in self.segments])
        self.exact, self.ann, self.bm25 = self._search_legs()

    def _search_legs(self) -> tuple[VectorIndex, VectorIndex | None, BM25Index]:
        if len(self.segments) == 1:
            only = self.segments[0]
            return only.exact, only.ann, only.bm25
        base, delta = self.segments
        exact = LayeredVectorIndex(self._layers([base.exact, delta.exact]), base.exact.dim)
        # The delta is small and has no graph: the ANN leg scans it exactly beside the base's graph.
        ann = None if base.ann is None else LayeredVectorIndex(self._layers([base.ann, delta.exact]), base.ann.dim)
        return exact, ann, delta.bm25  # a delta's BM25 index already spans its base (build_delta_segment)

    def _layers(self, indexes: list) -> list[Layer]:
        return [Layer(index, int(self._offsets[i]), len(segment))
                for i, (index, segment) in enumerate(zip(indexes, self.segments))]

    def __len__(self) -> int:
        return self.table.num_rows

    @property
    def tier(self) -> str:
        return self.manifest["tier"]

    def check_model(self, model_id: str, dim: int) -> None:
        """Refuse a query vector of another embedding model (or dimension) than every segment's: the
        similarities would be meaningless (or the search would fail on the shapes)."""
        for segment in self.segments:
            manifest = segment.manifest
            if (manifest["model_id"], int(manifest["dim"])) != (model_id, int(dim)):
                raise EmbeddingModelMismatch(
                    f"tenant {manifest['tenant_id']!r} segment {segment.directory.name} was embedded with "
                    f"{manifest['model_id']} ({manifest['dim']}-d) but queries are embedded with {model_id} "
                    f"({dim}-d); it is not searched until `citadel reembed --tenant {manifest['tenant_id']}` "
                    "finishes")

    @property
    def tombstones(self) -> int:
        """Base rows no longer live (superseded or withdrawn), waiting for compaction."""
        return int(self.manifest.get("tombstones", 0))

    def vectors_at(self, rows: Sequence[int] | np.ndarray) -> np.ndarray:
        """The stored (normalised) float32 vectors of these partition rows, in order."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.manifest["dim"]), dtype=np.float32)
        layer_of = np.searchsorted(self._offsets, rows, side="right") - 1
        for i, segment in enumerate(self.segments):
            mask = layer_of == i
            if mask.any():
                out[mask] = segment.vectors[rows[mask] - self._offsets[i]]
        return out

    def _locate(self, row_id: int) -> tuple[Segment, int]:
        """The segment holding a partition row, and the row's number within it."""
        if len(self.segments) == 1:
            return self.segments[0], row_id
        layer = int(np.searchsorted(self._offsets, row_id, side="right")) - 1
        return self.segments[layer], row_id - int(self._offsets[layer])

    def rows_for(self, versions: dict[str, int]) -> np.ndarray:
        """Sorted row ids of exactly these document versions (the readable set)."""
        parts = [segment.rows_by_version[key] + int(offset)
                 for segment, offset in zip(self.segments, self._offsets)
                 for key in versions.items() if key in segment.rows_by_version]
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.sort(np.concatenate(parts))

    def document_of(self, row_id: int) -> str:
        segment, row = self._locate(row_id)
        return segment.columns["document_id"][row]

    def row(self, row_id: int) -> dict:
        segment, row = self._locate(row_id)
        return {name: values[row] for name, values in segment.columns.items()}

    def chunk_text_for_bm25(self, row_id: int) -> str:
        segment, row = self._locate(row_id)
        return f"{segment.columns['context_header'][row]}\n{segment.columns['text'][row]}"


def verify_segment(directory: Path, expected_rows: int, probe_rows: Sequence[int]) -> Partition:
    """Pre-publish checks: counts, checksums, and that known chunks are found by both legs.

    For a delta the checks cover the delta's own files; its base was verified when it was published.
    """
    partition = Partition(directory)
    top = partition.segments[-1]
    if len(partition) != expected_rows or partition.manifest["chunks"] != len(top):
        raise VerificationFailed(f"segment has {len(partition)} rows, expected {expected_rows}")
    for name, digest in partition.manifest["checksums"].items():
        if file_sha256(directory / name) != digest:
            raise VerificationFailed(f"checksum mismatch for {name}")
    for row in probe_rows:
        _probe_vector(partition, row)
    return partition


def _probe_vector(partition: Partition, row: int) -> None:
    index = partition.ann or partition.exact
    query = partition.vectors_at([row])
    # A probe checks that the index holds and returns this chunk, not recall at the serving budget.
    _, ids = index.search(query, PROBE_TOP_K, ef_search=PROBE_EF_SEARCH)
    if row not in ids[0].tolist():
        raise VerificationFailed(f"probe: chunk row {row} not found by its own vector")


def prune_segments(partitions_dir: Path, tenant_id: str, keep: set[str]) -> None:
    """Delete the tenant's segments no pointer names any more (keeping the bases the kept deltas
    stack on), and leftovers of crashed builds. Only ever inside `tenant_root`."""
    root = tenant_root(partitions_dir, tenant_id)
    if not root.exists():
        return
    needed = {needed for segment_id in keep if (root / segment_id / MANIFEST).exists()
              for needed in stack_of(root, segment_id)}
    for path in root.iterdir():
        if path.is_dir() and path.name not in needed:
            shutil.rmtree(path, ignore_errors=True)


def sampled_texts(partition: "Partition", limit: int) -> list[str]:
    """The partition's chunk texts, or an evenly strided sample of `limit` of them: statistics of a
    tenant's vocabulary (term IDF, mined definitions) are ratios and counts a sample of this size
    estimates well, and the first query on a huge tenant stays cheap."""
    texts = partition.table.column("text").to_pylist()
    if len(texts) <= limit:
        return texts
    stride = len(texts) / limit
    return [texts[int(i * stride)] for i in range(limit)]


class SegmentCache(Generic[T]):
    """Data derived from a segment, cached by segment id with LRU eviction.

    Segments are immutable, so their id is a complete key. The build runs outside the lock: two
    threads may both build a missing entry, and the last one stored wins (both are equal).
    """

    def __init__(self, capacity: int):
        self._capacity = capacity
        self._entries: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, segment_id: str, build: Callable[[], T]) -> T:
        with self._lock:
            if segment_id in self._entries:
                self._entries.move_to_end(segment_id)
                return self._entries[segment_id]
        value = build()
        with self._lock:
            self._entries[segment_id] = value
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
        return value
