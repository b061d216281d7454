"""In-process state for the single-machine default: thread-safe dicts behind one lock per store.

Nothing here survives a restart or is shared between processes; that is what the Redis backend is for.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterable

from citadel.config import StateConfig
from citadel.state.base import (
    COST_SCALE,
    BudgetDecision,
    Clock,
    IdempotencyResult,
    IdempotencyStatus,
    budget_decision,
    budget_refusal,
    encode_value,
    to_cost_units,
    utc_day,
    validate_charge,
)

# Expired idempotency records are swept at most this often, so `begin` stays O(1) between sweeps.
IDEMPOTENCY_SWEEP_INTERVAL_S = 60.0


@dataclass
class _CacheEntry:
    payload: str
    expires_at: float
    tenant_id: str
    document_ids: frozenset[str]


class MemoryAnswerCache:
    """LRU bounded by `answer_cache_max_entries`, with tenant and (tenant, document) indexes for invalidation."""

    def __init__(self, config: StateConfig, clock: Clock = time.time):
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _CacheEntry] = OrderedDict()
        self._by_tenant: dict[str, set[str]] = {}
        self._by_document: dict[tuple[str, str], set[str]] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry.expires_at <= self._clock():
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return json.loads(entry.payload)

    def put(self, key: str, value: dict[str, Any], tenant_id: str, document_ids: Iterable[str]) -> None:
        payload = encode_value(value)
        docs = frozenset(document_ids)
        with self._lock:
            if key in self._entries:
                self._drop(key)
            self._entries[key] = _CacheEntry(payload, self._clock() + self._config.answer_cache_ttl_s, tenant_id, docs)
            self._by_tenant.setdefault(tenant_id, set()).add(key)
            for doc in docs:
                self._by_document.setdefault((tenant_id, doc), set()).add(key)
            while len(self._entries) > self._config.answer_cache_max_entries:
                self._drop(next(iter(self._entries)))

    def invalidate_documents(self, tenant_id: str, document_ids: Iterable[str]) -> int:
        with self._lock:
            keys = set().union(*(self._by_document.get((tenant_id, doc), ()) for doc in document_ids))
            return self._drop_counting_live(keys)

    def invalidate_tenant(self, tenant_id: str) -> int:
        with self._lock:
            return self._drop_counting_live(set(self._by_tenant.get(tenant_id, ())))

    def _drop_counting_live(self, keys: set[str]) -> int:
        """Drop the entries; count only unexpired ones, as the Redis backend does."""
        now = self._clock()
        live = 0
        for key in keys:
            entry = self._drop(key)
            live += entry is not None and entry.expires_at > now
        return live

    def _drop(self, key: str) -> _CacheEntry | None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        _discard(self._by_tenant, entry.tenant_id, key)
        for doc in entry.document_ids:
            _discard(self._by_document, (entry.tenant_id, doc), key)
        return entry


def _discard(index: dict[Any, set[str]], bucket: Any, key: str) -> None:
    """Remove a key from an index bucket, dropping empty buckets so the indexes cannot grow without bound."""
    members = index.get(bucket)
    if members is not None:
        members.discard(key)
        if not members:
            del index[bucket]


class MemoryBudgetStore:
    """Per-user counters keyed by UTC day; days before yesterday are forgotten when the day changes."""

    def __init__(self, config: StateConfig, clock: Clock = time.time):
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, str, int], tuple[int, int]] = {}
        self._last_day: int | None = None

    def charge(self, tenant_id: str, user_id: str, requests: int = 1, cost: float = 0.0) -> BudgetDecision:
        validate_charge(requests, cost)
        cost_units = to_cost_units(cost)
        with self._lock:
            now = self._clock()
            slot = (tenant_id, user_id, self._today(now))
            used_requests, used_cost = self._counters.get(slot, (0, 0))
            refusal = budget_refusal(self._config, used_requests, used_cost, requests, cost_units)
            if refusal is None:
                used_requests, used_cost = used_requests + requests, used_cost + cost_units
                self._counters[slot] = (used_requests, used_cost)
            return budget_decision(self._config, now, refusal, used_requests, used_cost)

    def usage(self, tenant_id: str, user_id: str) -> tuple[int, float]:
        with self._lock:
            now = self._clock()
            requests, cost_units = self._counters.get((tenant_id, user_id, self._today(now)), (0, 0))
            return requests, cost_units / COST_SCALE

    def _today(self, now: float) -> int:
        day = utc_day(now)
        if day != self._last_day:
            self._counters = {slot: used for slot, used in self._counters.items() if slot[2] >= day - 1}
            self._last_day = day
        return day


@dataclass
class _IdempotencyRecord:
    fingerprint: str
    expires_at: float
    response: dict[str, Any] | None = None
    status_code: int | None = None
    done: bool = False


class MemoryIdempotencyStore:
    """Reservations keyed by (scope, key); a record lives `idempotency_ttl_s` from begin, then from completion."""

    def __init__(self, config: StateConfig, clock: Clock = time.time):
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], _IdempotencyRecord] = {}
        self._next_sweep = float("-inf")

    def begin(self, scope: str, key: str, fingerprint: str) -> IdempotencyResult:
        with self._lock:
            now = self._clock()
            self._sweep(now)
            record = self._live(scope, key, now)
            if record is None:
                self._records[(scope, key)] = _IdempotencyRecord(fingerprint, now + self._config.idempotency_ttl_s)
                return IdempotencyResult(IdempotencyStatus.NEW)
            if record.fingerprint != fingerprint:
                return IdempotencyResult(IdempotencyStatus.CONFLICT)
            if not record.done:
                return IdempotencyResult(IdempotencyStatus.IN_PROGRESS)
            response = json.loads(encode_value(record.response or {}))
            return IdempotencyResult(IdempotencyStatus.DONE, response, record.status_code)

    def complete(self, scope: str, key: str, response: dict[str, Any], status_code: int) -> bool:
        """Store the response; False when the reservation had expired or was released (nothing stored)."""
        payload = json.loads(encode_value(response))
        with self._lock:
            now = self._clock()
            record = self._live(scope, key, now)
            if record is None:
                return False
            record.response, record.status_code, record.done = payload, status_code, True
            record.expires_at = now + self._config.idempotency_ttl_s
            return True

    def release(self, scope: str, key: str) -> None:
        with self._lock:
            self._records.pop((scope, key), None)

    def _live(self, scope: str, key: str, now: float) -> _IdempotencyRecord | None:
        record = self._records.get((scope, key))
        if record is not None and record.expires_at <= now:
            del self._records[(scope, key)]
            return None
        return record

    def _sweep(self, now: float) -> None:
        if now < self._next_sweep:
            return
        self._records = {slot: rec for slot, rec in self._records.items() if rec.expires_at > now}
        self._next_sweep = now + IDEMPOTENCY_SWEEP_INTERVAL_S
