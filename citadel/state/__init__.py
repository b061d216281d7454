"""Serving state beyond the catalog: answer cache, per-user budgets, idempotency keys (DESIGN.md §7).

`State` holds the three stores on one backend; `make_state` (citadel/state/factory.py) picks Redis when
`StateConfig.redis_url` is set (shared by replicas) and in-process state otherwise (the single-machine
default). redis-py is imported only when Redis is configured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal

from citadel.state.base import (
    AnswerCache,
    BudgetDecision,
    BudgetStore,
    IdempotencyResult,
    IdempotencyStatus,
    IdempotencyStore,
    StateUnavailable,
    answer_cache_key,
)

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
]
