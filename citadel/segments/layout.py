"""Where segments live on disk: a tenant's directory, the files of a segment directory, which
segments a published pointer needs, and pruning the ones no pointer names any more.

    <partitions_dir>/<tenant>/<segment id>/
        manifest.json   (citadel.segments.manifest)
        chunks.parquet  one row per chunk; the row number is the id every index uses
        vectors.npy     the stored, normalised float32 vectors
        vector/         the ANN index of a hot or cold base (tiny tenants and deltas have none)
        bm25/           tantivy; a delta's spans its base too
        tombstones.npy  a delta's base rows no longer live
    <partitions_dir>/<tenant>/.tmp-<id>/   a segment being written (renamed into place when complete)
"""

from __future__ import annotations

import shutil
from pathlib import Path

from citadel.segments.manifest import MANIFEST, read_manifest
from citadel.types import validate_tenant_id

CHUNKS = "chunks.parquet"
VECTORS = "vectors.npy"
VECTOR_DIR = "vector"
BM25_DIR = "bm25"
TOMBSTONES = "tombstones.npy"
TMP_PREFIX = ".tmp-"


def tenant_root(partitions_dir: Path, tenant_id: str) -> Path:
    """`<partitions_dir>/<tenant>`, the one place a tenant's directory is named. The id is validated
    first, so no tenant id (`..`, `a/../b`, `/`, a NUL) can name a path outside `partitions_dir`,
    and pruning one tenant can never touch another's segments."""
    return Path(partitions_dir) / validate_tenant_id(tenant_id)


def stack_of(root: Path, segment_id: str) -> list[str]:
    """The segment ids a pointer to `segment_id` needs on disk: its base first, then itself."""
    return read_manifest(Path(root) / segment_id).stack(segment_id)


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
