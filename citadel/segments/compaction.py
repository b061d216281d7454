"""Delta or rebuild: where a tenant's next publish goes (DESIGN.md §3).

An incremental publish writes a small delta segment over the published base: the rows added since
the base was built, plus tombstones for the base rows no longer live. That costs the rows since the
base, not the tenant. Compaction rebuilds the base from the live rows when the delta or the
tombstones grow past their thresholds (a large delta is scanned exactly on every query; tombstones
waste memory and make every search filtered), when the tier changes, or when the tenant is small
enough that a rebuild costs seconds anyway. A change of embedding model is not a compaction: stored
vectors of another model are never reused, the live rows are embedded again (citadel.ingest.reembed).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from citadel.config import IndexConfig
from citadel.segments.build import choose_tier, read_chunk_table
from citadel.segments.layout import CHUNKS, VECTORS
from citadel.segments.manifest import SegmentKind, read_manifest
from citadel.segments.tiering import UNKNOWN_TRAFFIC, TierStanding


class RebuildReason(StrEnum):
    """Why a publish rebuilds the base instead of writing a delta (job reports carry the value)."""

    FIRST_BUILD = "first_build"
    FORCED = "forced"
    SMALL_BASE = "small_base"
    MODEL_CHANGE = "model_change"
    TIER_CHANGE = "tier_change"
    TOMBSTONES = "tombstones"
    DELTA_FULL = "delta_full"


@dataclass(frozen=True)
class PublishedStack:
    """What the published pointer serves, read cheaply: the base's identity and the (document, version)
    of each base row, and the delta's own rows (small by construction)."""

    base_id: str
    base_rows: int
    base_tier: str
    base_model: str
    base_dim: int
    base_documents: list[str]
    base_versions: list[int]
    delta_table: pa.Table | None
    delta_vectors: np.ndarray | None


def read_stack(root: Path, published: str | None) -> PublishedStack | None:
    if published is None:
        return None
    top = read_manifest(root / published)
    base_id = top.base if top.base is not None else published
    base = read_manifest(root / base_id)
    keys = pq.read_table(root / base_id / CHUNKS, columns=["document_id", "version"])
    delta_table = delta_vectors = None
    if base_id != published:
        delta_table = read_chunk_table(root / published / CHUNKS)
        delta_vectors = np.load(root / published / VECTORS)
    return PublishedStack(base_id, keys.num_rows, base.tier, base.model_id, base.dim,
                          keys.column("document_id").to_pylist(), keys.column("version").to_pylist(),
                          delta_table, delta_vectors)


def live_mask(documents: list[str], versions: list[int], live: Mapping[str, int]) -> np.ndarray:
    """Which rows hold the live version of their document (`live`: document → published version)."""
    return np.fromiter((live.get(d) == v for d, v in zip(documents, versions)), dtype=bool, count=len(documents))


@dataclass(frozen=True)
class PublishPlan:
    """Where the next publish goes: a delta over the published base, or a rebuilt base (and why)."""

    kind: SegmentKind
    rebuild_reason: RebuildReason | None  # set exactly when the plan rebuilds the base
    tier: str
    tombstones: np.ndarray  # base rows no longer live (a delta records them)
    kept_delta_table: pa.Table | None
    kept_delta_vectors: np.ndarray | None

    @classmethod
    def rebuild(cls, reason: RebuildReason, tier: str, tombstones: np.ndarray, kept_table: pa.Table | None = None,
                kept_vectors: np.ndarray | None = None) -> "PublishPlan":
        return cls(SegmentKind.BASE, reason, tier, tombstones, kept_table, kept_vectors)

    @classmethod
    def delta(cls, tier: str, tombstones: np.ndarray, kept_table: pa.Table | None,
              kept_vectors: np.ndarray | None) -> "PublishPlan":
        return cls(SegmentKind.DELTA, None, tier, tombstones, kept_table, kept_vectors)


def plan_publish(stack: PublishedStack | None, live: Mapping[str, int], new_rows: int, tenant_id: str,
                 model_id: str, dim: int, config: IndexConfig, force_rebuild: bool = False,
                 standing: TierStanding | None = None) -> PublishPlan:
    """Decide delta or rebuild for a publish adding `new_rows` rows and keeping the `live` versions.

    The tier comes from size and the tenant's `standing` (traffic, tier entered when: citadel.segments.
    tiering); a tier that changes rebuilds the base. Without a standing, traffic moves nothing."""
    if stack is None:
        return PublishPlan.rebuild(RebuildReason.FIRST_BUILD, choose_tier(tenant_id, new_rows, config, standing),
                                   np.zeros(0, np.int64))
    standing = (standing or UNKNOWN_TRAFFIC).in_tier(stack.base_tier)  # an older catalog: the manifest's tier
    base_live = live_mask(stack.base_documents, stack.base_versions, live)
    tombstones = np.flatnonzero(~base_live).astype(np.int64)
    kept_table = kept_vectors = None
    if stack.delta_table is not None:
        delta_live = live_mask(stack.delta_table.column("document_id").to_pylist(),
                                stack.delta_table.column("version").to_pylist(), live)
        kept_table, kept_vectors = stack.delta_table.filter(pa.array(delta_live)), stack.delta_vectors[delta_live]
    delta_rows = new_rows + (kept_table.num_rows if kept_table is not None else 0)
    live_base_rows = int(base_live.sum())
    tier = choose_tier(tenant_id, live_base_rows + delta_rows, config, standing)
    reason = _rebuild_reason(stack, tier, len(tombstones), live_base_rows, delta_rows, model_id, dim, config,
                             force_rebuild)
    if reason is None:
        return PublishPlan.delta(tier, tombstones, kept_table, kept_vectors)
    return PublishPlan.rebuild(reason, tier, tombstones, kept_table, kept_vectors)


def model_changed(stack: PublishedStack | None, model_id: str, dim: int) -> bool:
    """Whether the published vectors come from another embedding model (or dimension) than this one."""
    return stack is not None and (stack.base_model, stack.base_dim) != (model_id, dim)


def _rebuild_reason(stack: PublishedStack, tier: str, tombstones: int, live_base_rows: int, delta_rows: int,
                    model_id: str, dim: int, config: IndexConfig, force_rebuild: bool) -> RebuildReason | None:
    delta_limit = min(config.delta_max_rows, config.delta_max_fraction * live_base_rows)
    checks = (
        (force_rebuild, RebuildReason.FORCED),
        (stack.base_rows < config.delta_min_base_rows, RebuildReason.SMALL_BASE),
        (model_changed(stack, model_id, dim), RebuildReason.MODEL_CHANGE),
        (tier != stack.base_tier, RebuildReason.TIER_CHANGE),
        (tombstones > config.tombstone_max_fraction * stack.base_rows, RebuildReason.TOMBSTONES),
        (delta_rows > delta_limit, RebuildReason.DELTA_FULL),
    )
    return next((reason for failed, reason in checks if failed), None)
