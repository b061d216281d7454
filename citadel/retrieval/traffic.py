"""Queries per tenant, counted where partitions are searched, for tiering by traffic (DESIGN.md §3).

Every search of a tenant's partition (a retrieval, an answer's, a run step's) counts one query for the
tenant in this process's memory; every `index.traffic_flush_s` the counts are added to the catalog's
row of the day (TrafficLog.record_queries), which every replica shares, in a thread of its own: the
query's path never waits on that write. A catalog that cannot be written keeps the counts for the next
flush. Counts not yet flushed when a process ends are lost (at most one interval's worth): tiering
reads a mean over days, which that does not move.

The tier policy (citadel/segments/tiering.py) reads the days back at a publish or a compaction.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from citadel.catalog.base import TrafficLog
from citadel.config import IndexConfig
from citadel.errors import CatalogUnavailable
from citadel.segments.tiering import day_of
from citadel.types import Principal

log = logging.getLogger(__name__)


def _in_a_thread(work: Callable[[], object]) -> None:
    threading.Thread(target=work, name="traffic-flush", daemon=True).start()


class TrafficCounter:
    """Per-tenant query counts of this process, flushed to the catalog every `traffic_flush_s`.

    `spawn` runs a due flush (a daemon thread by default; tests run it inline); `clock` gives epoch
    seconds (the day a flush's counts are added to)."""

    def __init__(self, traffic: TrafficLog, config: IndexConfig, clock: Callable[[], float] = time.time,
                 spawn: Callable[[Callable[[], object]], None] = _in_a_thread):
        self._traffic = traffic
        self._config = config
        self._clock = clock
        self._spawn = spawn
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._last_flush = clock()
        self._flushing = False

    def record(self, tenant_id: str) -> None:
        """One query of the tenant's partition; starts a flush when one is due and none is running."""
        with self._lock:
            if tenant_id in self._counts or len(self._counts) < self._config.traffic_max_tenants:
                self._counts[tenant_id] = self._counts.get(tenant_id, 0) + 1
            due = not self._flushing and self._clock() - self._last_flush >= self._config.traffic_flush_s
            self._flushing = self._flushing or due
        if due:
            self._spawn(self._flush_due)

    def pending(self) -> dict[str, int]:
        """The counts not yet flushed (a copy)."""
        with self._lock:
            return dict(self._counts)

    def flush(self) -> int:
        """Add the pending counts to the catalog's row of today now; returns the queries written (0 when
        the catalog could not be written: the counts stay for the next flush)."""
        with self._lock:
            counts, self._counts = self._counts, {}
            self._last_flush = self._clock()
        if not counts:
            return 0
        try:
            self._traffic.record_queries(day_of(self._clock(), self._config.tier_day_s), counts,
                                         self._config.tier_window_days)
        except CatalogUnavailable:
            log.warning("tier traffic not recorded (%d tenants): the catalog is unavailable; kept for the next "
                        "flush", len(counts))
            with self._lock:
                for tenant_id, n in counts.items():
                    self._counts[tenant_id] = self._counts.get(tenant_id, 0) + n
            return 0
        return sum(counts.values())

    def _flush_due(self) -> None:
        try:
            self.flush()
        finally:
            with self._lock:
                self._flushing = False


class CountingRetriever:
    """A retriever whose every search counts one query of the principal's tenant (TrafficCounter)."""

    def __init__(self, inner, counter: TrafficCounter):
        self._inner = inner
        self.counter = counter

    def retrieve(self, principal: Principal, query: str, top_k: int | None = None, request_id: str | None = None):
        self.counter.record(principal.tenant_id)
        return self._inner.retrieve(principal, query, top_k, request_id)
