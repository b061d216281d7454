"""Loading what a tenant's published pointer names: one base segment, or a delta stacked on its base,
served as one partition (one chunk table, one exact index, one ANN leg, one BM25 index, row ids
running across the stack), plus caches of data derived from immutable segments.

The on-disk layout is citadel.segments.layout, the manifest citadel.segments.manifest, writing
citadel.segments.build; compaction (citadel.segments.compaction) decides when a delta's base is rebuilt.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Generic, Mapping, Sequence, TypeVar

import numpy as np
import pyarrow as pa

from citadel.errors import EmbeddingModelMismatch
from citadel.index.base import VectorIndex
from citadel.index.bm25 import BM25Index
from citadel.index.exact import ExactIndex
from citadel.index.factory import load_vector_index
from citadel.index.layered import Layer, LayeredVectorIndex
from citadel.segments.build import read_chunk_table
from citadel.segments.layout import BM25_DIR, CHUNKS, VECTOR_DIR, VECTORS
from citadel.segments.manifest import Manifest, read_manifest

T = TypeVar("T")


class Segment:
    """One loaded segment directory: its chunk table, vectors, exact index, ANN index (if any), BM25."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.manifest: Manifest = read_manifest(self.directory)
        self.table = read_chunk_table(self.directory / CHUNKS)
        self.vectors = np.load(self.directory / VECTORS, mmap_mode="r")
        self.exact = ExactIndex(self.manifest.dim)
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
        return self.manifest.is_delta


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
            base_dir = top.directory.parent / top.manifest.base
            self.segments = [loaded.get(base_dir) or Segment(base_dir), top]
        else:
            self.segments = [top]
        self.directory = top.directory
        self.segment_id = self.directory.name
        self.manifest: Manifest = top.manifest
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
        return self.manifest.tier

    def check_model(self, model_id: str, dim: int) -> None:
        """Refuse a query vector of another embedding model (or dimension) than every segment's: the
        similarities would be meaningless (or the search would fail on the shapes)."""
        for segment in self.segments:
            manifest = segment.manifest
            if (manifest.model_id, manifest.dim) != (model_id, int(dim)):
                raise EmbeddingModelMismatch(
                    f"tenant {manifest.tenant_id!r} segment {segment.directory.name} was embedded with "
                    f"{manifest.model_id} ({manifest.dim}-d) but queries are embedded with {model_id} "
                    f"({dim}-d); it is not searched until `citadel reembed --tenant {manifest.tenant_id}` "
                    "finishes")

    @property
    def tombstones(self) -> int:
        """Base rows no longer live (superseded or withdrawn), waiting for compaction."""
        return self.manifest.tombstones

    def vectors_at(self, rows: Sequence[int] | np.ndarray) -> np.ndarray:
        """The stored (normalised) float32 vectors of these partition rows, in order."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.manifest.dim), dtype=np.float32)
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
