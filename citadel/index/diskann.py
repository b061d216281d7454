"""DiskANN over `diskannpy` (the `diskannpy-rust` 0.49.1 package): the SSD base segment of cold partitions.

Choices (see DESIGN.md §6):
- Package: `diskannpy-rust` rather than `diskannpy` 0.7.0, because it has no numpy pin (0.7.0 pins
  numpy==1.25, which breaks pyarrow) and built 1M x 384 about 2.5x cheaper with equal recall.
- Index type: `build_disk_index` + `StaticDiskIndex` (graph and full vectors on disk, PQ codes in RAM).
  `num_of_pq_chunks` is always set (the library default of 1 byte per vector ruins the in-RAM
  distance estimates): dim // 4, capped, unless given.  Some nodes are always cached on load
  (`num_nodes_to_cache=0` hung in the other package).
- Metric: the graph is built with "l2" on the unit vectors. For L2-normalised vectors
  |a - b|^2 = 2 - 2 a.b, so the ranking is the inner-product ranking and the score is recovered as
  1 - d/2.  (The "innerproduct" disk build measured lower recall here: 0.85 vs 0.94 at L=64.)
- Ids: DiskANN numbers points 0..n-1 in build order; a `RowIdMap` (ids.npy) maps them to row ids.
- Build location: `add` builds into a private temporary directory (or under `build_root`) and the
  index is searchable at once; `save(directory)` moves the files there and reopens from it.

Filtered search: the static disk index has no filter support, so `allowed` is honoured two ways.
- Small allowed sets (<= `exact_rescore_max_allowed` rows): exact inner products over just those
  rows, read from a float16 (or float32) copy of the vectors memory-mapped beside the index
  (`rescore_vectors.npy`, `np.load(mmap_mode="r")`).  Cost is proportional to the readable set and
  recall is 1.0 (up to fp16 rounding), which is what the planner wants for selective filters.
- Larger allowed sets: an ANN search with a growing candidate list.  It starts at
  k' = k / fraction * `candidate_oversample` (the expected number of candidates needed to see k
  allowed ones), searches with list size L >= 2k' (a list only as long as the answer has an
  unreliable tail: 1% allowed, L = k' gave recall 0.91, L = 2k' 0.985), keeps only allowed ids,
  and doubles k' for the queries still short of k, while the list stays smaller than the index.
  A query still short then falls back to the exact re-score (a list that long costs more than the
  scan), so a result is never short while k allowed rows exist.
Either way no disallowed id can be returned: membership is checked before anything is kept.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Iterator

# diskannpy-rust logs every INFO event to stdout through Rust's tracing: JSON printed by the CLI
# (`retrieve --json` on a cold tenant) would be corrupted. Errors still show; RUST_LOG can override.
os.environ.setdefault("RUST_LOG", "error")

import diskannpy  # noqa: E402  (after RUST_LOG, which the native module reads when it loads)
import numpy as np

from citadel.index.exact import (
    IDS_FILE,
    RowIdMap,
    as_allowed,
    as_query_matrix,
    contains_sorted,
    exact_top_k,
    padded_empty,
    read_index_meta,
    validate_vectors_and_ids,
    write_index_meta,
)

INDEX_PREFIX = "ann"
BUILD_METRIC = "l2"
RESCORE_VECTORS_FILE = "rescore_vectors.npy"
# The library writes its build input here; it is not needed for search (the disk index embeds the
# full-precision vectors), so it is deleted after the build.
BUILD_INPUT_FILE = f"{INDEX_PREFIX}_vectors.bin"
RESCORE_DTYPES = ("float16", "float32")

DEFAULT_GRAPH_DEGREE = 64
DEFAULT_BUILD_COMPLEXITY = 128
DEFAULT_SEARCH_COMPLEXITY = 100
DEFAULT_BEAM_WIDTH = 4
DEFAULT_BUILD_MEMORY_GB = 1.0
DEFAULT_CACHE_NODES = 1024
DEFAULT_EXACT_RESCORE_MAX_ALLOWED = 20_000
DEFAULT_CANDIDATE_OVERSAMPLE = 2.0
# The post-filter search list is this many times the candidates it must return: the tail of a list
# only as long as the answer is unreliable (20k x 384, 1% allowed: L = k' gave filtered recall 0.91,
# L = 2k' gave 0.985).
POST_FILTER_LIST_FACTOR = 2
# One PQ byte per 4 dimensions keeps the in-RAM codes at 1/16 of fp32 while estimating distances
# well enough to route the search; capped because beyond it RAM grows with little recall gained.
DIMS_PER_PQ_CHUNK = 4
MAX_PQ_CHUNKS = 128


def default_pq_chunks(dim: int) -> int:
    return max(1, min(dim // DIMS_PER_PQ_CHUNK, MAX_PQ_CHUNKS))


def squared_l2_to_inner_product(distances: np.ndarray) -> np.ndarray:
    """For unit vectors |a-b|^2 = 2 - 2 a.b, hence a.b = 1 - d/2."""
    return (1.0 - 0.5 * np.asarray(distances, dtype=np.float32)).astype(np.float32, copy=False)



@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Route file descriptor 1 to stderr while native code prints its build progress there."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


class DiskANNIndex:
    """DiskANN static disk index with row ids, inner-product scores and filtered search."""

    kind: ClassVar[str] = "diskann"

    def __init__(
        self,
        dim: int,
        graph_degree: int = DEFAULT_GRAPH_DEGREE,
        build_complexity: int = DEFAULT_BUILD_COMPLEXITY,
        search_complexity: int = DEFAULT_SEARCH_COMPLEXITY,
        beam_width: int = DEFAULT_BEAM_WIDTH,
        pq_chunks: int | None = None,
        build_memory_gb: float = DEFAULT_BUILD_MEMORY_GB,
        build_threads: int = 0,
        search_threads: int = 1,
        cache_nodes: int = DEFAULT_CACHE_NODES,
        exact_rescore_max_allowed: int = DEFAULT_EXACT_RESCORE_MAX_ALLOWED,
        rescore_dtype: str = "float16",
        candidate_oversample: float = DEFAULT_CANDIDATE_OVERSAMPLE,
        build_root: str | None = None,
    ):
        if rescore_dtype not in RESCORE_DTYPES:
            raise ValueError(f"rescore_dtype must be one of {RESCORE_DTYPES}, got {rescore_dtype!r}")
        self._dim = int(dim)
        self.graph_degree = int(graph_degree)
        self.build_complexity = int(build_complexity)
        self.search_complexity = int(search_complexity)
        self.beam_width = int(beam_width)
        self.pq_chunks = int(pq_chunks) if pq_chunks else default_pq_chunks(self._dim)
        self.build_memory_gb = float(build_memory_gb)
        self.build_threads = int(build_threads)  # 0 = all cores (library convention)
        self.search_threads = int(search_threads)
        self.cache_nodes = int(cache_nodes)
        # Query-time policy, not part of the built files: may be changed on a loaded index.
        self.exact_rescore_max_allowed = int(exact_rescore_max_allowed)
        self.rescore_dtype = rescore_dtype
        self.candidate_oversample = float(candidate_oversample)
        self.build_root = build_root

        self._directory: Path | None = None
        self._owns_directory = False
        self._cleanup: weakref.finalize | None = None
        self._disk_index: diskannpy.StaticDiskIndex | None = None
        self._rescore_vectors = np.zeros((0, self._dim), dtype=np.dtype(rescore_dtype))
        self._id_map = RowIdMap(np.zeros(0, dtype=np.int64))

    @property
    def dim(self) -> int:
        return self._dim

    def __len__(self) -> int:
        return len(self._id_map)

    @property
    def directory(self) -> Path | None:
        """Where the index files currently live (a private temp dir until `save`)."""
        return self._directory

    def params(self) -> dict[str, Any]:
        return {
            "dim": self._dim,
            "graph_degree": self.graph_degree,
            "build_complexity": self.build_complexity,
            "search_complexity": self.search_complexity,
            "beam_width": self.beam_width,
            "pq_chunks": self.pq_chunks,
            "build_memory_gb": self.build_memory_gb,
            "build_threads": self.build_threads,
            "search_threads": self.search_threads,
            "cache_nodes": self.cache_nodes,
            "exact_rescore_max_allowed": self.exact_rescore_max_allowed,
            "rescore_dtype": self.rescore_dtype,
            "candidate_oversample": self.candidate_oversample,
        }

    # -- build -------------------------------------------------------------------------------

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        if self._directory is not None:
            raise RuntimeError("DiskANNIndex.add is called once per build")
        matrix, row_ids = validate_vectors_and_ids(vectors, ids, self._dim)
        self._id_map = RowIdMap(row_ids)
        if matrix.shape[0] == 0:
            return  # nothing to build; every search returns padding
        build_dir = Path(tempfile.mkdtemp(prefix="citadel-diskann-", dir=self.build_root))
        self._adopt_temp_directory(build_dir)
        with _stdout_to_stderr():
            diskannpy.build_disk_index(
                data=matrix,
                distance_metric=BUILD_METRIC,
                index_directory=str(build_dir),
                complexity=self.build_complexity,
                graph_degree=self.graph_degree,
                build_memory_maximum=self.build_memory_gb,
                num_threads=self.build_threads,
                num_of_pq_chunks=self.pq_chunks,
                index_prefix=INDEX_PREFIX,
            )
        (build_dir / BUILD_INPUT_FILE).unlink(missing_ok=True)
        np.save(build_dir / RESCORE_VECTORS_FILE, matrix.astype(self.rescore_dtype))
        np.save(build_dir / IDS_FILE, row_ids)
        self._open(build_dir)

    def _adopt_temp_directory(self, build_dir: Path) -> None:
        self._directory = build_dir
        self._owns_directory = True
        # Remove the build directory if the index is dropped without being saved.
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(build_dir), True)

    def _open(self, directory: Path) -> None:
        """(Re)open the native index and the memory-mapped re-score copy from `directory`."""
        self._directory = directory
        self._disk_index = None  # release the previous native handle first
        self._disk_index = diskannpy.StaticDiskIndex(
            index_directory=str(directory),
            num_threads=self.search_threads,
            beam_width=self.beam_width,
            num_nodes_to_cache=max(1, min(self.cache_nodes, len(self))),
            index_prefix=INDEX_PREFIX,
        )
        self._rescore_vectors = np.load(directory / RESCORE_VECTORS_FILE, mmap_mode="r")

    # -- search ------------------------------------------------------------------------------

    def search(
        self,
        queries: np.ndarray,
        k: int,
        allowed: np.ndarray | None = None,
        ef_search: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """`ef_search` is DiskANN's search complexity L (candidate list size)."""
        query_matrix = as_query_matrix(queries, self._dim)
        if len(self) == 0:
            return padded_empty(query_matrix.shape[0], k)
        complexity = self.search_complexity if ef_search is None else int(ef_search)
        if allowed is None:
            return self._ann_search(query_matrix, k, complexity)
        positions = self._id_map.to_internal(as_allowed(allowed))
        if positions.size == 0:
            return padded_empty(query_matrix.shape[0], k)
        if positions.size <= self.exact_rescore_max_allowed:
            return self._exact_search(query_matrix, k, positions)
        return self._post_filtered_search(query_matrix, k, positions, complexity)

    def _raw_search(
        self, queries: np.ndarray, count: int, complexity: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Internal positions and inner-product scores of the `count` nearest, best first."""
        count = min(count, len(self))
        response = self._disk_index.batch_search(
            queries, count, max(complexity, count), self.search_threads
        )
        positions = np.asarray(response.identifiers, dtype=np.int64).reshape(len(queries), -1)
        scores = squared_l2_to_inner_product(response.distances).reshape(len(queries), -1)
        return positions, scores

    def _ann_search(self, queries: np.ndarray, k: int, complexity: int) -> tuple[np.ndarray, np.ndarray]:
        positions, scores = self._raw_search(queries, k, complexity)
        out_scores, out_ids = padded_empty(len(queries), k)
        valid = positions < len(self)  # defensive: never surface an id the library did not index
        for row in range(len(queries)):
            kept = positions[row][valid[row]]
            out_ids[row, : kept.size] = self._id_map.to_external(kept)
            out_scores[row, : kept.size] = scores[row][valid[row]]
        return out_scores, out_ids

    def _exact_search(
        self, queries: np.ndarray, k: int, sorted_positions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        # Sorted positions make the gather from the memory-mapped copy read the file in order.
        rows = self._rescore_vectors[sorted_positions]
        return exact_top_k(queries, rows, self._id_map.to_external(sorted_positions), k)

    def _post_filtered_search(
        self, queries: np.ndarray, k: int, sorted_positions: np.ndarray, complexity: int
    ) -> tuple[np.ndarray, np.ndarray]:
        n = len(self)
        out_scores, out_ids = padded_empty(len(queries), k)
        wanted = min(k, sorted_positions.size)
        fraction = sorted_positions.size / n
        candidates = max(k, math.ceil(k / fraction * self.candidate_oversample))
        pending = np.arange(len(queries))
        # Once the search list would cover the whole index, a graph walk costs more than scanning
        # the allowed rows, so the remaining queries go to the exact re-score instead.
        while pending.size and POST_FILTER_LIST_FACTOR * candidates < n:
            list_size = max(complexity, POST_FILTER_LIST_FACTOR * candidates)
            positions, scores = self._raw_search(queries[pending], candidates, list_size)
            still_short = []
            for row, query_no in enumerate(pending):
                keep = contains_sorted(sorted_positions, positions[row])
                found = positions[row][keep][:wanted]
                if found.size < wanted:
                    still_short.append(query_no)
                    continue
                out_ids[query_no, :wanted] = self._id_map.to_external(found)
                out_scores[query_no, :wanted] = scores[row][keep][:wanted]
            pending = np.asarray(still_short, dtype=np.int64)
            candidates *= 2
        if pending.size:
            out_scores[pending], out_ids[pending] = self._exact_search(queries[pending], k, sorted_positions)
        return out_scores, out_ids

    # -- persistence -------------------------------------------------------------------------

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self._directory is not None and self._directory.resolve() != directory.resolve():
            self._transfer_files(directory)
        if self._directory is None:  # empty index: only the ids and the parameters
            np.save(directory / IDS_FILE, self._id_map.external_ids)
        write_index_meta(directory, self.kind, self.params())

    def _transfer_files(self, directory: Path) -> None:
        """Move the private build files to `directory` (and serve from there), or copy a saved index."""
        source = self._directory
        for path in source.iterdir():
            target = directory / path.name
            if self._owns_directory:
                shutil.move(str(path), str(target))
            else:
                shutil.copy2(path, target)
        if self._owns_directory:
            self._open(directory)
            self._cleanup.detach()
            shutil.rmtree(source, ignore_errors=True)
            self._owns_directory = False

    @classmethod
    def load(cls, directory: Path, **overrides: Any) -> "DiskANNIndex":
        """Open a saved index; `overrides` may change query-time settings (threads, thresholds)."""
        directory = Path(directory)
        params = {**read_index_meta(directory)["params"], **overrides}
        index = cls(**params)
        index._id_map = RowIdMap(np.load(directory / IDS_FILE))
        if len(index) > 0:
            index._open(directory)
        return index
