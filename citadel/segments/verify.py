"""Pre-publish verification of a built segment (DESIGN.md §3): row counts, the manifest's checksums,
and probe queries showing the index finds known chunks. Nothing is published unless it passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from citadel.errors import VerificationFailed
from citadel.segments.manifest import file_sha256
from citadel.segments.partition import Partition

PROBE_TOP_K = 10
PROBE_EF_SEARCH = 256  # search budget of a pre-publish probe (HNSW efSearch, DiskANN list size)


def verify_segment(directory: Path, expected_rows: int, probe_rows: Sequence[int]) -> Partition:
    """Pre-publish checks: counts, checksums, and that known chunks are found by both legs.

    For a delta the checks cover the delta's own files; its base was verified when it was published.
    """
    partition = Partition(directory)
    top = partition.segments[-1]
    if len(partition) != expected_rows or partition.manifest.chunks != len(top):
        raise VerificationFailed(f"segment has {len(partition)} rows, expected {expected_rows}")
    for name, digest in partition.manifest.checksums.items():
        if file_sha256(Path(directory) / name) != digest:
            raise VerificationFailed(f"checksum mismatch for {name}")
    for row in probe_rows:
        probe(partition, row)
    return partition


def probe(partition: Partition, row: int) -> None:
    """The row's own stored vector must find the row: the index holds and returns this chunk (this
    checks the index, not recall at the serving budget)."""
    index = partition.ann or partition.exact
    query = partition.vectors_at([row])
    _, ids = index.search(query, PROBE_TOP_K, ef_search=PROBE_EF_SEARCH)
    if row not in ids[0].tolist():
        raise VerificationFailed(f"probe: chunk row {row} not found by its own vector")
