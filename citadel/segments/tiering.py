"""The tier a tenant's partition is built in, by size and traffic (DESIGN.md §3).

tiny (at most `index.tiny_max_chunks`): exact search, no index. Above tiny, a tenant is **hot** (HNSW
in RAM) when it is busy — at least `hot_min_queries_per_day` over the traffic window — and not small
(`hot_min_chunks`); small or rarely used tenants are **cold** (DiskANN on SSD: little RAM, still
queryable). The biggest busy tenants stay hot and get a retriever deployment of their own
(serving/ray/dedicated.py).

Two rules keep tenants from flapping between tiers:
- **hysteresis**: a threshold is crossed only past it by `tier_margin` (above t·(1+m) to go up, below
  t·(1−m) to come down), so a tenant near a threshold stays where it is;
- **minimum stay**: a tenant keeps its tier at least `tier_min_stay_days` (the catalog records when it
  entered it: TrafficLog.tier_entries), except a tiny tenant grown past its margin, which leaves at
  once because exact search must stay small.

A move happens only where a segment is built — a publish or a compaction — never on a query's path:
the policy is read by `citadel.segments.compaction.plan_publish`, and a changed tier rebuilds the base.
Queries per day come from the catalog's per-day counts (citadel/retrieval/traffic.py records them).

What moves a tenant that nobody publishes to: `apply_tier_moves`, which compacts the tenants whose tier
the policy changes; `citadel tiers --apply` runs it, and so does every job runner each
`index.tier_check_interval_s` (citadel/ingest/runner.py), between its jobs.

A "day" here is `index.tier_day_s` seconds (a UTC day, 86,400 s): queries a day, the traffic window and
the minimum stay are all counted in it, so a test can run the whole policy in seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

from citadel.catalog.base import TierEntry, TrafficLog
from citadel.config import IndexConfig

TINY, HOT, COLD = "tiny", "hot", "cold"
SECONDS_PER_DAY = 86_400.0
Report = TypeVar("Report")


def day_of(epoch_s: float, day_s: float = SECONDS_PER_DAY) -> int:
    """The day number of an instant, for days of `day_s` seconds (UTC days by default): the catalog's
    traffic rows are keyed by it."""
    return int(epoch_s // day_s)


@dataclass(frozen=True)
class TierStanding:
    """What the policy knows of a tenant besides its size: its queries a day over the window (None:
    not known, so traffic moves nothing), the tier it is in and since when (None: never published),
    and the time now."""

    queries_per_day: float | None
    current: TierEntry | None
    now: float

    def in_tier(self, tier: str) -> "TierStanding":
        """This standing, in `tier` since an unknown time (long ago) unless it already records one."""
        return self if self.current is not None else TierStanding(self.queries_per_day, TierEntry(tier, -math.inf),
                                                                  self.now)


# Nothing known: a first build goes by size alone, and a tenant already built keeps its tier.
UNKNOWN_TRAFFIC = TierStanding(None, None, 0.0)


def decide_tier(tenant_id: str, chunks: int, standing: TierStanding, config: IndexConfig) -> str:
    """The tier the tenant's next base segment is built in."""
    if tenant_id in config.tier_overrides:
        return config.tier_overrides[tenant_id]
    current = standing.current
    wanted = _wanted_tier(chunks, standing.queries_per_day, config, current.tier if current else None)
    if current is None or wanted == current.tier:
        return wanted
    if current.tier == TINY:
        return wanted  # grown past tiny's margin: exact search over it would be slow, no minimum stay
    stayed_days = (standing.now - current.entered_at) / config.tier_day_s
    return wanted if stayed_days >= config.tier_min_stay_days else current.tier


def _wanted_tier(chunks: int, queries_per_day: float | None, config: IndexConfig, current: str | None) -> str:
    """The tier size and traffic ask for, with the hysteresis of the tier the tenant is in."""
    margin = config.tier_margin if current is not None else 0.0
    tiny_limit = config.tiny_max_chunks * ((1 + margin) if current == TINY else (1 - margin))
    if chunks <= tiny_limit:
        return TINY
    hot = current == HOT
    busy = hot if queries_per_day is None else _past(queries_per_day, config.hot_min_queries_per_day, hot, margin)
    if current is None and queries_per_day is None:
        busy = False  # a new tenant with no traffic yet is rarely used
    big_enough = _past(chunks, config.hot_min_chunks, hot, margin)
    capped = config.hot_max_chunks is not None and _past(chunks, config.hot_max_chunks, not hot, margin)
    return HOT if busy and big_enough and not capped else COLD


def _past(value: float, threshold: float, above_now: bool, margin: float) -> bool:
    """Whether `value` is above `threshold`, with hysteresis: one already above stays above down to
    t·(1−margin); one below must reach t·(1+margin)."""
    return value >= threshold * ((1 - margin) if above_now else (1 + margin))


def queries_per_day(traffic: TrafficLog, tenant_ids: list[str], now: float, window_days: int,
                    day_s: float = SECONDS_PER_DAY) -> dict[str, float]:
    """Each tenant's mean queries a day over the `window_days` days (of `day_s` seconds) up to today (0
    for none)."""
    totals = traffic.queries_since(tenant_ids, day_of(now, day_s) - window_days + 1)
    return {tenant_id: totals.get(tenant_id, 0) / window_days for tenant_id in tenant_ids}


def tier_standing(traffic: TrafficLog, tenant_id: str, now: float, config: IndexConfig) -> TierStanding:
    """The tenant's standing from the catalog: its traffic over the window and its tier's entry."""
    per_day = queries_per_day(traffic, [tenant_id], now, config.tier_window_days, config.tier_day_s)[tenant_id]
    return TierStanding(per_day, traffic.tier_entries([tenant_id]).get(tenant_id), now)


@dataclass(frozen=True)
class TierReview:
    """One published tenant as the policy sees it now: its size, traffic and tier, and the tier its
    next publish or compaction would build (`moves`: they differ)."""

    tenant_id: str
    chunks: int
    queries_per_day: float
    tier: str
    entered_at: float
    wanted: str

    @property
    def moves(self) -> bool:
        return self.wanted != self.tier


def review_tiers(catalog, config: IndexConfig, now: float, only: Sequence[str] | None = None) -> list[TierReview]:
    """Every published tenant's standing (or only those of `only`) and the tier the policy gives it
    (`catalog`: a Publisher and a TrafficLog). Reading it moves nothing: a compaction of the tenants
    that `moves` does (apply_tier_moves)."""
    published = [row for row in catalog.list_tenants()
                 if row["segment_id"] is not None and (only is None or row["tenant_id"] in only)]
    tenant_ids = [row["tenant_id"] for row in published]
    rates = queries_per_day(catalog, tenant_ids, now, config.tier_window_days, config.tier_day_s)
    entries = catalog.tier_entries(tenant_ids)
    reviews = []
    for row in published:
        tenant_id, chunks = row["tenant_id"], int(row["published_chunks"] or 0)
        current = entries.get(tenant_id) or TierEntry(row["tier"], -math.inf)  # published before tiers were kept
        wanted = decide_tier(tenant_id, chunks, TierStanding(rates[tenant_id], current, now), config)
        reviews.append(TierReview(tenant_id, chunks, rates[tenant_id], current.tier, current.entered_at, wanted))
    return reviews


def apply_tier_moves(catalog, config: IndexConfig, now: float,
                     compact: Callable[[str], Report | None]) -> list[Report]:
    """Move every tenant whose tier the policy changes now: `compact(tenant_id)` rebuilds its base, and
    the build decides the tier again (the move happens there). `compact` should skip a tenant another
    runner has moved meanwhile (citadel.ingest.local.Ingestor.compact's `only_if_tier_moves`) and
    answer None then. Returns the reports of the compactions that ran."""
    reports = []
    for review in review_tiers(catalog, config, now):
        if review.moves:
            report = compact(review.tenant_id)
            if report is not None:
                reports.append(report)
    return reports
