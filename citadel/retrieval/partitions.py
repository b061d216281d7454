"""Loaded partitions, keyed by the catalog's published pointer, with a small LRU."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

from citadel.catalog.base import Publisher
from citadel.segments.layout import tenant_root
from citadel.segments.partition import Partition, Segment
from citadel.types import validate_tenant_id


class PartitionCache:
    def __init__(self, catalog: Publisher, partitions_dir: Path, capacity: int = 16):
        self._catalog = catalog
        self._root = Path(partitions_dir)
        self._capacity = capacity
        self._loaded: OrderedDict[tuple[str, str], Partition] = OrderedDict()
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()

    def get(self, tenant_id: str) -> Partition | None:
        """The partition the pointer names now (a new pointer loads the new segment)."""
        validate_tenant_id(tenant_id)  # before the catalog or the filesystem sees it
        segment_id = self._catalog.published_segment(tenant_id)
        if segment_id is None:
            return None
        key = (tenant_id, segment_id)
        loaded = self._cached(key)
        if loaded is not None:
            return loaded
        # One load at a time: two steps of a run asking for the same tenant at once load it once, and
        # numpy's header parse (ast.literal_eval) never runs on two threads together, which CPython
        # 3.11 can fail with "SystemError: AST constructor recursion depth mismatch" (gh-106905).
        with self._load_lock:
            loaded = self._cached(key)
            if loaded is not None:
                return loaded
            partition = Partition(tenant_root(self._root, tenant_id) / segment_id,
                                  loaded=self._loaded_segments(tenant_id))
        with self._lock:
            self._loaded[key] = partition
            self._evict_stale(tenant_id, segment_id)
            while len(self._loaded) > self._capacity:
                self._loaded.popitem(last=False)
        return partition

    def _cached(self, key: tuple[str, str]) -> Partition | None:
        with self._lock:
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key]
        return None

    def _loaded_segments(self, tenant_id: str) -> dict[Path, Segment]:
        """The tenant's segments already in memory: a new delta over the same base reuses the base."""
        with self._lock:
            partitions = [p for key, p in self._loaded.items() if key[0] == tenant_id]
        return {segment.directory: segment for p in partitions for segment in p.segments}

    def tenants(self) -> list[str]:
        """The tenants whose partitions this cache holds now, sorted (which replica serves whom)."""
        with self._lock:
            return sorted({tenant_id for tenant_id, _ in self._loaded})

    def tiers(self) -> dict[str, str]:
        """The tier each held tenant's partition was built in (one partition per tenant: a new pointer's
        load drops the old one), so an operator sees a tier move reach the replicas."""
        with self._lock:
            return {tenant_id: partition.tier for (tenant_id, _), partition in self._loaded.items()}

    def evict(self, tenant_id: str) -> int:
        """Forget every loaded segment of a tenant (a multiplexing LRU let it go). Safe to call
        twice or for a tenant never loaded; returns how many segments were dropped."""
        with self._lock:
            keys = [k for k in self._loaded if k[0] == tenant_id]
            for key in keys:
                del self._loaded[key]
        return len(keys)

    def _evict_stale(self, tenant_id: str, current: str) -> None:
        for key in [k for k in self._loaded if k[0] == tenant_id and k[1] != current]:
            del self._loaded[key]
