"""A segment's manifest: the typed record of what one segment directory holds (DESIGN.md §3).

`manifest.json` names the tenant, tier, embedding model and dimension, the row count, the
(document, version) pairs, the checksums of the data files, and whether the segment is a base or a
delta stacked on a base (with the base's id and row count, and how many base rows it tombstones).
Every reader goes through `Manifest`, so a field is named and typed in one place. The JSON keys and
their order are those the writers have always used; a base omits the delta-only keys.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Mapping

from citadel.errors import VerificationFailed

MANIFEST = "manifest.json"
CHECKSUM_BLOCK = 1 << 20
# The vector index each tier's base segment holds (tiny tenants are searched exactly); a delta is exact.
TIER_BACKEND = {"tiny": "exact", "hot": "hnsw", "cold": "diskann"}
EXACT_BACKEND = "exact"
_DELTA_KEYS = ("base", "base_rows", "tombstones")


class SegmentKind(StrEnum):
    """A base holds a tenant's rows with its own index; a delta holds the rows published since its base."""

    BASE = "base"
    DELTA = "delta"


@dataclass(frozen=True)
class DocumentVersion:
    document_id: str
    version: int


@dataclass(frozen=True)
class Manifest:
    """One segment's manifest. `chunks` counts this segment's own rows; a delta's base adds `base_rows`."""

    tenant_id: str
    tier: str
    model_id: str
    dim: int
    chunks: int
    documents: tuple[DocumentVersion, ...]
    checksums: Mapping[str, str]  # data file name → sha256
    created_at: float
    kind: SegmentKind = SegmentKind.BASE
    backend: str = EXACT_BACKEND  # the vector index type (exact, hnsw, diskann)
    base: str | None = None  # a delta's base segment id
    base_rows: int = 0  # rows of that base (the delta's row ids follow them)
    tombstones: int = 0  # base rows a delta marks no longer live

    def __post_init__(self) -> None:
        if self.is_delta != (self.base is not None):
            raise VerificationFailed(f"a {self.kind} segment manifest {'needs' if self.is_delta else 'has'} a base")

    @property
    def is_delta(self) -> bool:
        return self.kind is SegmentKind.DELTA

    @property
    def total_rows(self) -> int:
        """Rows a pointer to this segment serves, counting a delta's base."""
        return self.chunks + self.base_rows

    def stack(self, segment_id: str) -> list[str]:
        """The segment ids a pointer to this segment (`segment_id`) needs: its base first, then itself."""
        return [self.base, segment_id] if self.base is not None else [segment_id]

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, keys in the order the format has always had; a base omits the delta keys."""
        data: dict[str, Any] = {
            "tenant_id": self.tenant_id,
            "tier": self.tier,
            "model_id": self.model_id,
            "dim": self.dim,
            "chunks": self.chunks,
            "documents": [{"document_id": d.document_id, "version": d.version} for d in self.documents],
            "checksums": dict(self.checksums),
            "created_at": self.created_at,
            "kind": self.kind.value,
            "backend": self.backend,
        }
        if self.is_delta:
            data.update(base=self.base, base_rows=self.base_rows, tombstones=self.tombstones)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Manifest":
        """Parse a manifest object; a segment written before deltas existed has no kind (a base) and no
        backend (its tier's)."""
        kind = SegmentKind(data.get("kind", SegmentKind.BASE))
        default_backend = EXACT_BACKEND if kind is SegmentKind.DELTA else TIER_BACKEND.get(data["tier"], EXACT_BACKEND)
        return cls(
            tenant_id=str(data["tenant_id"]),
            tier=str(data["tier"]),
            model_id=str(data["model_id"]),
            dim=int(data["dim"]),
            chunks=int(data["chunks"]),
            documents=tuple(DocumentVersion(str(d["document_id"]), int(d["version"])) for d in data["documents"]),
            checksums={str(name): str(digest) for name, digest in data["checksums"].items()},
            created_at=float(data["created_at"]),
            kind=kind,
            backend=str(data.get("backend") or default_backend),
            base=None if data.get("base") is None else str(data["base"]),
            base_rows=int(data.get("base_rows", 0)),
            tombstones=int(data.get("tombstones", 0)),
        )


def read_manifest(directory: Path) -> Manifest:
    """The manifest of the segment in `directory`; a malformed one is a VerificationFailed naming it."""
    path = Path(directory) / MANIFEST
    try:
        return Manifest.from_dict(json.loads(path.read_text()))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise VerificationFailed(f"segment manifest {path} is malformed: {type(error).__name__}: {error}") from error


def write_manifest(directory: Path, manifest: Manifest) -> None:
    (Path(directory) / MANIFEST).write_text(json.dumps(manifest.to_dict(), indent=1))


def file_sha256(path: Path) -> str:
    """The checksum a manifest records for a data file (read in blocks: files reach gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHECKSUM_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def documents_of(pairs: list[tuple[str, int]]) -> tuple[DocumentVersion, ...]:
    """The sorted, distinct (document, version) pairs of a segment's rows."""
    return tuple(DocumentVersion(d, int(v)) for d, v in sorted(set(pairs)))
