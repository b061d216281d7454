"""The state stores a deployment is built with, chosen from config: the answer cache, budgets and
idempotency keys (`make_state`), runs (`make_run_store`) and conversations (`make_conversation_store`).

The contract modules (base.py, runs.py, conversations.py) define each store and its in-process
reference; the backends (memory.py, redis_store.py, runs_sqlite.py, runs_redis.py,
conversations_sqlite.py) implement them; only this module knows them all. Redis backends are imported
lazily, so redis-py is imported only when Redis is configured.
"""

from __future__ import annotations

import time

from citadel.config import CitadelConfig, StateConfig
from citadel.state import State
from citadel.state.base import Clock
from citadel.state.conversations import ConversationStore, MemoryConversationStore
from citadel.state.conversations_sqlite import SQLiteConversationStore
from citadel.state.memory import MemoryAnswerCache, MemoryBudgetStore, MemoryIdempotencyStore
from citadel.state.runs import MemoryRunStore, RunStore
from citadel.state.runs_sqlite import SQLiteRunStore


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
    from citadel.state.redis_client import connect

    client = connect(config.redis_url)
    return State(
        redis_store.RedisAnswerCache(client, config, now),
        redis_store.RedisBudgetStore(client, config, now),
        redis_store.RedisIdempotencyStore(client, config, now),
        "redis",
        client.close,
    )


def make_run_store(config: CitadelConfig, clock: Clock | None = None, backend: str | None = None) -> RunStore:
    """The run store this deployment shares: Redis Streams when `state.redis_url` is set, else SQLite at
    `config.runs_path`; in process only when `backend="memory"` is asked for (tests, one process).

    Backends are imported lazily, so redis-py is imported only when Redis is configured. The durable
    stores have a `close()`; Redis is contacted at first use, the SQLite file is opened (and its schema
    created) here."""
    now = clock or time.time
    chosen = backend or ("redis" if config.state.redis_url else "sqlite")
    if chosen == "memory":
        return MemoryRunStore(now)
    if chosen == "sqlite":
        return SQLiteRunStore(config.runs_path, now)
    if chosen == "redis":
        if not config.state.redis_url:
            raise ValueError("the redis run store needs state.redis_url")
        from citadel.state.redis_client import connect
        from citadel.state.runs_redis import RedisRunStore

        return RedisRunStore(connect(config.state.redis_url), config.state.key_prefix, now)
    raise ValueError(f"unknown run store backend {backend!r} (memory, sqlite or redis)")


def make_conversation_store(config: CitadelConfig, clock: Clock | None = None,
                            backend: str | None = None) -> ConversationStore:
    """Conversations in SQLite at `config.runs_path` (beside the SQLite runs); in process only when
    `backend="memory"` is asked for. The SQLite store has a `close()`."""
    now = clock or time.time
    chosen = backend or "sqlite"
    if chosen == "memory":
        return MemoryConversationStore(now)
    if chosen == "sqlite":
        return SQLiteConversationStore(config.runs_path, now)
    raise ValueError(f"unknown conversation store backend {backend!r} (memory or sqlite)")
