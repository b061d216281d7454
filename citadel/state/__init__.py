"""Serving state beyond the catalog: answer cache, per-user budgets, idempotency keys (DESIGN.md §7).

`make_state` picks Redis when `StateConfig.redis_url` is set (shared by replicas) and in-process state
otherwise (the single-machine default). redis-py is imported only when Redis is configured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Literal

from citadel.config import StateConfig
from citadel.state.base import (
    AnswerCache,
    BudgetDecision,
    BudgetStore,
    Clock,
    IdempotencyResult,
    IdempotencyStatus,
    IdempotencyStore,
    StateUnavailable,
    answer_cache_key,
)
from citadel.state.memory import MemoryAnswerCache, MemoryBudgetStore, MemoryIdempotencyStore

Backend = Literal["redis", "memory"]


def _nothing_to_close() -> None:
    return None


@dataclass
class State:
    cache: AnswerCache
    budgets: BudgetStore
    idempotency: IdempotencyStore
    backend: Backend
    _close: Callable[[], None] = field(default=_nothing_to_close, repr=False)

    def close(self) -> None:
        """Release the backend's connections (a no-op in process)."""
        self._close()


def make_state(config: StateConfig, clock: Clock | None = None) -> State:
    """Build all three stores on one backend; nothing is contacted until first use."""
    now = clock or time.time
    if not config.redis_url:
        return State(
            MemoryAnswerCache(config, now),
            MemoryBudgetStore(config, now),
            MemoryIdempotencyStore(config, now),
            "memory",
        )
    from citadel.state import redis_store

    client = redis_store.connect(config.redis_url)
    return State(
        redis_store.RedisAnswerCache(client, config, now),
        redis_store.RedisBudgetStore(client, config, now),
        redis_store.RedisIdempotencyStore(client, config, now),
        "redis",
        client.close,
    )


__all__ = [
    "AnswerCache",
    "BudgetDecision",
    "BudgetStore",
    "IdempotencyResult",
    "IdempotencyStatus",
    "IdempotencyStore",
    "State",
    "StateUnavailable",
    "answer_cache_key",
    "make_state",
]
