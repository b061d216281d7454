"""Per-replica latency tracking with outlier ejection: a replica much slower than its peers is
tried last until its evidence goes stale (DESIGN.md §5: "half-alive replicas").

Pure Python with an injected clock; serving/ray/routing.py plugs it into Serve's request router. Each
replica keeps an exponentially weighted mean of its recent latencies. A replica is an outlier when
its mean exceeds `factor` x the median of its peers' means and `min_gap_ms` more. An outlier gets
no traffic while others can take it, so its evidence is forgotten after `stale_s`: it is then tried
again, and ejected again as soon as a request there has been in flight longer than an outlier's
mean would be (`sent`/`completed` track requests in flight, so the first slow request is evidence
before it completes).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Hashable, Iterable

DEFAULT_ALPHA = 0.3        # weight of the newest sample in the moving mean
DEFAULT_FACTOR = 3.0       # slower than 3x the peers' median mean is an outlier
DEFAULT_MIN_GAP_MS = 20.0  # and by at least this much (tiny absolute differences are noise)
DEFAULT_STALE_S = 5.0      # evidence older than this is forgotten (the replica is tried again)
MIN_PEERS = 1
MS = 1000.0


@dataclass
class _Mean:
    value_ms: float
    updated: float


class LatencyOutliers:
    def __init__(self, alpha: float = DEFAULT_ALPHA, factor: float = DEFAULT_FACTOR,
                 min_gap_ms: float = DEFAULT_MIN_GAP_MS, stale_s: float = DEFAULT_STALE_S,
                 clock: Callable[[], float] = time.monotonic):
        self.alpha = alpha
        self.factor = factor
        self.min_gap_ms = min_gap_ms
        self.stale_s = stale_s
        self._clock = clock
        self._means: dict[Hashable, _Mean] = {}
        self._in_flight: dict[Hashable, deque[float]] = {}
        self._lock = threading.Lock()

    def sent(self, replica: Hashable) -> None:
        """A request went to `replica` (its completion is matched first in, first out)."""
        with self._lock:
            self._in_flight.setdefault(replica, deque()).append(self._clock())

    def completed(self, replica: Hashable) -> None:
        """A request to `replica` finished (or was cancelled): its time in flight is a sample."""
        with self._lock:
            queue = self._in_flight.get(replica)
            started = queue.popleft() if queue else None
        if started is not None:
            self.observe(replica, (self._clock() - started) * MS)

    def observe(self, replica: Hashable, latency_ms: float) -> None:
        now = self._clock()
        with self._lock:
            mean = self._means.get(replica)
            if mean is None or now - mean.updated > self.stale_s:
                self._means[replica] = _Mean(latency_ms, now)
            else:
                mean.value_ms += self.alpha * (latency_ms - mean.value_ms)
                mean.updated = now

    def forget(self, replica: Hashable) -> None:
        with self._lock:
            self._means.pop(replica, None)
            self._in_flight.pop(replica, None)

    def _fresh(self, now: float) -> dict[Hashable, float]:
        """Each replica's mean, raised to the age of its oldest request still in flight."""
        fresh = {r: m.value_ms for r, m in self._means.items() if now - m.updated <= self.stale_s}
        for replica, queue in self._in_flight.items():
            if queue:
                age_ms = (now - queue[0]) * MS
                fresh[replica] = max(fresh.get(replica, 0.0), age_ms)
        return fresh

    def outliers(self, replicas: Iterable[Hashable]) -> set[Hashable]:
        """Which of `replicas` are much slower than their peers right now."""
        now = self._clock()
        with self._lock:
            fresh = self._fresh(now)
        known = {r: fresh[r] for r in replicas if r in fresh}
        slow = set()
        for replica, mean in known.items():
            peers = [m for r, m in known.items() if r != replica]
            if len(peers) < MIN_PEERS:
                continue
            typical = statistics.median(peers)
            if mean > self.factor * typical and mean - typical > self.min_gap_ms:
                slow.add(replica)
        return slow

    def rank(self, replicas: list) -> list[list]:
        """`replicas` split into [usual, outliers], outliers last (an empty rank is dropped)."""
        slow = self.outliers(replicas)
        ranks = [[r for r in replicas if r not in slow], [r for r in replicas if r in slow]]
        return [rank for rank in ranks if rank]
