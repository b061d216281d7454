"""Where a document's rows sit in a tenant's segments, for deleting them on withdrawal.

A withdrawn document is excluded at query time through the catalog at once; deleting its rows takes
a publish that no longer holds them (citadel.ingest.local.Ingestor.expunge): a new delta when the rows
are only in the delta (a delta's BM25 index is rebuilt over its base's text, which does not hold
them), a rebuilt base when the base holds any row of it (live or tombstoned: tombstones only hide
rows). These helpers read chunk tables only, never vectors or indexes.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from citadel.segments.compaction import read_stack
from citadel.segments.layout import CHUNKS, tenant_root
from citadel.segments.manifest import MANIFEST


def base_holds(root: Path, published: str, document_id: str) -> bool:
    """Whether the published stack's base segment has any row of the document (any version)."""
    return document_id in set(read_stack(root, published).base_documents)


def stack_holds(root: Path, published: str, document_id: str) -> bool:
    """Whether the published stack (base or delta) has any row of the document (any version)."""
    stack = read_stack(root, published)
    in_delta = stack.delta_table is not None and document_id in set(
        stack.delta_table.column("document_id").to_pylist())
    return in_delta or document_id in set(stack.base_documents)


def segments_holding(partitions_dir: Path, tenant_id: str, document_id: str, chunk_ids: set[str]) -> list[str]:
    """Every segment directory of the tenant on disk (published or not) with a row of the document,
    by its id or by one of its chunk ids (the catalog's per-version manifests)."""
    root = tenant_root(partitions_dir, tenant_id)
    if not root.exists():
        return []
    holding = []
    for segment in sorted(path for path in root.iterdir() if (path / MANIFEST).exists()):
        table = pq.read_table(segment / CHUNKS, columns=["chunk_id", "document_id"])
        if document_id in set(table.column("document_id").to_pylist()) or chunk_ids & set(
                table.column("chunk_id").to_pylist()):
            holding.append(segment.name)
    return holding
