"""The job report every ingest engine returns: per-file outcomes, phase timings, and what was published
(the segment, its tier and kind, why a base was rebuilt). `to_dict` is what the catalog's jobs table
stores and what `citadel ingest --json` prints; both engines give it the same keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from citadel.catalog.base import JobLog
from citadel.ingest.sources import FileOutcome
from citadel.segments.compaction import RebuildReason
from citadel.segments.manifest import SegmentKind


@dataclass
class JobReport:
    job_id: str
    tenant_id: str
    status: str = "running"
    files: list[FileOutcome] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    segment_id: str | None = None
    tier: str | None = None
    total_chunks: int = 0
    segment_kind: SegmentKind | None = None  # delta (an incremental publish) or base (a rebuild)
    rebuild_reason: RebuildReason | None = None
    reembed: dict[str, Any] | None = None  # a re-embed job: rows, resumed_from, previous_model

    @property
    def failures(self) -> list[FileOutcome]:
        return [f for f in self.files if f.status == "failed"]

    def to_dict(self) -> dict[str, Any]:
        new_chunks = sum(f.chunks for f in self.files if f.status == "published")
        elapsed = sum(self.seconds.values())
        return {
            "job_id": self.job_id,
            "tenant_id": self.tenant_id,
            "status": self.status,
            "documents": len(self.files),
            "published": sum(f.status == "published" for f in self.files),
            "unchanged": sum(f.status == "unchanged" for f in self.files),
            "failed": len(self.failures),
            "chunks": new_chunks,
            "partition_chunks": self.total_chunks,
            "segment_id": self.segment_id,
            "segment_kind": plain(self.segment_kind),
            "rebuild_reason": plain(self.rebuild_reason),
            "tier": self.tier,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "chunks_per_s": round(new_chunks / elapsed, 1) if elapsed else 0.0,
            "files": [f.to_dict() for f in self.files],
            **({"reembed": self.reembed} if self.reembed is not None else {}),
        }


def plain(value: Enum | None) -> Any:
    """An enum's value for a report dict (stored as JSON, compared by callers as text)."""
    return None if value is None else value.value


@contextmanager
def recorded(catalog: JobLog, report: JobReport) -> Iterator[JobReport]:
    """The job's row gets the report when the block ends: its status as the block set it, or
    `failed` with the error when the block raised (which is raised on). Both engines run a job in one."""
    try:
        yield report
    except BaseException as error:
        report.status = "failed"
        catalog.finish_job(report.job_id, "failed", {**report.to_dict(), "error": str(error)})
        raise
    catalog.finish_job(report.job_id, report.status, report.to_dict())
