"""Redis-backed state, shared by every replica (DESIGN.md §7).

Every key starts with `config.key_prefix` so deployments can share a server; ids inside keys are
percent-quoted so a ':' in a tenant or user id cannot collide with another key. Time-based decisions use
the injected clock (entries carry their own expiry), while Redis EX/PX only reclaims the memory.
Connection and timeout errors become `StateUnavailable` so callers choose to fail open or closed.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any, Iterable

import redis

from citadel.config import StateConfig
from citadel.state.base import (
    COST_SCALE,
    SECONDS_PER_DAY,
    BudgetDecision,
    Clock,
    IdempotencyResult,
    IdempotencyStatus,
    budget_decision,
    cost_budget_reason,
    encode_value,
    request_budget_reason,
    to_cost_units,
    utc_day,
    validate_charge,
)
from citadel.state.redis_client import key_part, reachable, ttl_ms

# Budget counters outlive their UTC day by a day, so clock skew between replicas never resets them early.
BUDGET_KEY_TTL_S = 2 * SECONDS_PER_DAY
# Cache entries fetched and deleted per round trip during invalidation.
INVALIDATION_BATCH = 500

# Check-and-add in one script: two replicas can never both take the last request of a budget.
# Returns {allowed, refusal (0 none, 1 requests, 2 cost), requests used, cost units used}.
_CHARGE_LUA = """
local used_r = tonumber(redis.call('HGET', KEYS[1], 'requests') or '0')
local used_c = tonumber(redis.call('HGET', KEYS[1], 'cost') or '0')
local req, cost = tonumber(ARGV[1]), tonumber(ARGV[2])
if used_r + req > tonumber(ARGV[3]) then return {0, 1, used_r, used_c} end
if used_c + cost > tonumber(ARGV[4]) then return {0, 2, used_r, used_c} end
redis.call('HINCRBY', KEYS[1], 'requests', req)
redis.call('HINCRBY', KEYS[1], 'cost', cost)
redis.call('EXPIRE', KEYS[1], ARGV[5])
return {1, 0, used_r + req, used_c + cost}
"""
_REFUSALS = {1: request_budget_reason, 2: cost_budget_reason}

# Reserve unless a live record exists (expiry judged by the caller's clock in ARGV[1]); returns the live
# record's {fingerprint, done, body, code}, or nil after reserving.
_BEGIN_LUA = """
local exp = redis.call('HGET', KEYS[1], 'exp')
if exp and tonumber(exp) > tonumber(ARGV[1]) then
  return redis.call('HMGET', KEYS[1], 'fp', 'done', 'body', 'code')
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'fp', ARGV[2], 'exp', ARGV[3], 'done', '0')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return false
"""

# Store the response only into a live reservation, so a late completion cannot resurrect a released key.
_COMPLETE_LUA = """
local exp = redis.call('HGET', KEYS[1], 'exp')
if not exp or tonumber(exp) <= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'done', '1', 'body', ARGV[2], 'code', ARGV[3], 'exp', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""


class RedisAnswerCache:
    """Entries are JSON envelopes {exp, tenant, docs, value}; per-tenant and per-document sets index them."""

    def __init__(self, client: redis.Redis, config: StateConfig, clock: Clock = time.time):
        self._redis, self._config, self._clock = client, config, clock
        self._prefix = f"{config.key_prefix}cache:"

    def _entry(self, key: str) -> str:
        return f"{self._prefix}entry:{key}"

    def _tenant_index(self, tenant_id: str) -> str:
        return f"{self._prefix}tenant:{key_part(tenant_id)}"

    def _document_index(self, tenant_id: str, document_id: str) -> str:
        return f"{self._prefix}doc:{key_part(tenant_id)}:{key_part(document_id)}"

    def get(self, key: str) -> dict[str, Any] | None:
        with reachable():
            raw = self._redis.get(self._entry(key))
            if raw is None:
                return None
            envelope = json.loads(raw)
            if envelope["exp"] <= self._clock():
                self._redis.delete(self._entry(key))
                return None
            return json.loads(envelope["value"])

    def put(self, key: str, value: dict[str, Any], tenant_id: str, document_ids: Iterable[str]) -> None:
        docs = sorted(set(document_ids))
        ttl_s = self._config.answer_cache_ttl_s
        envelope = {"exp": self._clock() + ttl_s, "tenant": tenant_id, "docs": docs, "value": encode_value(value)}
        expiry_ms = ttl_ms(ttl_s)
        # One transaction: an entry is never visible without the index entries that let invalidation find it.
        # Indexes get the entry's TTL; the newest entry always has the longest, so indexes outlive their entries.
        with reachable(), self._redis.pipeline(transaction=True) as pipe:
            pipe.set(self._entry(key), json.dumps(envelope), px=expiry_ms)
            for index in [self._tenant_index(tenant_id)] + [self._document_index(tenant_id, d) for d in docs]:
                pipe.sadd(index, key)
                pipe.pexpire(index, expiry_ms)
            pipe.execute()

    def invalidate_documents(self, tenant_id: str, document_ids: Iterable[str]) -> int:
        indexes = [self._document_index(tenant_id, d) for d in set(document_ids)]
        if not indexes:
            return 0
        with reachable():
            keys = sorted(self._redis.sunion(indexes))
            self._redis.delete(*indexes)
            return self._drop(tenant_id, keys)

    def invalidate_tenant(self, tenant_id: str) -> int:
        with reachable():
            keys = sorted(self._redis.smembers(self._tenant_index(tenant_id)))
            return self._drop(tenant_id, keys)

    def _drop(self, tenant_id: str, keys: list[str]) -> int:
        """Delete entries and unlink them from every index; count those still live by the injected clock.

        Not one transaction with the index read: a put racing an invalidation may survive it, which is why
        callers put the published version in the key (`answer_cache_key`'s source_versions).
        """
        live = 0
        now = self._clock()
        for start in range(0, len(keys), INVALIDATION_BATCH):
            batch = keys[start : start + INVALIDATION_BATCH]
            by_document: dict[str, list[str]] = defaultdict(list)
            for key, raw in zip(batch, self._redis.mget([self._entry(k) for k in batch])):
                if raw is None:
                    continue
                envelope = json.loads(raw)
                live += envelope["exp"] > now
                for doc in envelope["docs"]:
                    by_document[self._document_index(tenant_id, doc)].append(key)
            with self._redis.pipeline(transaction=True) as pipe:
                pipe.delete(*[self._entry(k) for k in batch])
                pipe.srem(self._tenant_index(tenant_id), *batch)
                for index, members in by_document.items():
                    pipe.srem(index, *members)
                pipe.execute()
        return live


class RedisBudgetStore:
    """One hash {requests, cost} per user per UTC day, changed only by the atomic check-and-add script."""

    def __init__(self, client: redis.Redis, config: StateConfig, clock: Clock = time.time):
        self._redis, self._config, self._clock = client, config, clock
        self._charge = client.register_script(_CHARGE_LUA)

    def _key(self, tenant_id: str, user_id: str, now: float) -> str:
        return f"{self._config.key_prefix}budget:{key_part(tenant_id)}:{key_part(user_id)}:{utc_day(now)}"

    def charge(self, tenant_id: str, user_id: str, requests: int = 1, cost: float = 0.0) -> BudgetDecision:
        validate_charge(requests, cost)
        now = self._clock()
        limits = [self._config.budget_requests_per_day, to_cost_units(self._config.budget_cost_per_day)]
        args = [requests, to_cost_units(cost), *limits, BUDGET_KEY_TTL_S]
        with reachable():
            _, refusal, used_requests, used_cost = self._charge(keys=[self._key(tenant_id, user_id, now)], args=args)
        reason = _REFUSALS[refusal](self._config) if refusal else None
        return budget_decision(self._config, now, reason, int(used_requests), int(used_cost))

    def usage(self, tenant_id: str, user_id: str) -> tuple[int, float]:
        now = self._clock()
        with reachable():
            requests, cost_units = self._redis.hmget(self._key(tenant_id, user_id, now), ["requests", "cost"])
        return int(requests or 0), int(cost_units or 0) / COST_SCALE


class RedisIdempotencyStore:
    """One hash {fp, exp, done, body, code} per (scope, key), reserved and completed by scripts."""

    def __init__(self, client: redis.Redis, config: StateConfig, clock: Clock = time.time):
        self._redis, self._config, self._clock = client, config, clock
        self._begin = client.register_script(_BEGIN_LUA)
        self._complete = client.register_script(_COMPLETE_LUA)

    def _key(self, scope: str, key: str) -> str:
        return f"{self._config.key_prefix}idem:{key_part(scope)}:{key_part(key)}"

    def begin(self, scope: str, key: str, fingerprint: str) -> IdempotencyResult:
        now, ttl_s = self._clock(), self._config.idempotency_ttl_s
        args = [repr(now), fingerprint, repr(now + ttl_s), ttl_ms(ttl_s)]
        with reachable():
            record = self._begin(keys=[self._key(scope, key)], args=args)
        if record is None:
            return IdempotencyResult(IdempotencyStatus.NEW)
        stored_fingerprint, done, body, code = record
        if stored_fingerprint != fingerprint:
            return IdempotencyResult(IdempotencyStatus.CONFLICT)
        if done != "1":
            return IdempotencyResult(IdempotencyStatus.IN_PROGRESS)
        return IdempotencyResult(IdempotencyStatus.DONE, json.loads(body), int(code))

    def complete(self, scope: str, key: str, response: dict[str, Any], status_code: int) -> bool:
        """Store the response; False when the reservation had expired or was released (nothing stored)."""
        now, ttl_s = self._clock(), self._config.idempotency_ttl_s
        args = [repr(now), encode_value(response), int(status_code), repr(now + ttl_s), ttl_ms(ttl_s)]
        with reachable():
            return bool(self._complete(keys=[self._key(scope, key)], args=args))

    def release(self, scope: str, key: str) -> None:
        with reachable():
            self._redis.delete(self._key(scope, key))
