"""A run's spend (DESIGN.md §10, stopping rule 2): tokens of prompts and outputs, and their estimated cost,
charged to the user's daily budget as they are spent (runs are budgeted like answers).

Tokens are counted with the same cheap counter chunking uses (words and punctuation marks), or the
server's own `usage` when a model reports one. The meter is shared by the steps of a round running
in parallel, hence its lock; a resumed run starts it from the spend recorded with each finished step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from citadel.chunking import count_tokens
from citadel.state.base import StateUnavailable
from citadel.types import Principal

TOKEN_BUDGET = "token_budget"
COST_BUDGET = "cost_budget"


class TokenMeter:
    """A thread-safe running total of tokens spent."""

    def __init__(self, spent: int = 0):
        self._spent = max(0, int(spent))
        self._lock = threading.Lock()

    def add(self, tokens: int) -> int:
        with self._lock:
            self._spent += max(0, int(tokens))
            return self._spent

    def add_text(self, *texts: str) -> int:
        """Count the texts' tokens (a prompt, an output) and add them; returns what they cost."""
        tokens = sum(count_tokens(t) for t in texts if t)
        self.add(tokens)
        return tokens

    @property
    def spent(self) -> int:
        with self._lock:
            return self._spent


@dataclass(frozen=True)
class RunBudget:
    """The per-run limits: tokens, and cost at `cost_per_1k_tokens` (state.cost_unit)."""

    tokens: int
    cost: float
    cost_per_1k_tokens: float = 0.0

    def cost_of(self, tokens: int) -> float:
        return tokens / 1000.0 * self.cost_per_1k_tokens

    def exhausted(self, tokens: int) -> str | None:
        """Which limit `tokens` spent has reached, or None."""
        if tokens >= self.tokens:
            return TOKEN_BUDGET
        if self.cost_per_1k_tokens > 0 and self.cost_of(tokens) >= self.cost:
            return COST_BUDGET
        return None


# The stopping rule of a run that would pass its user's daily budget (the same budget /v1/answer
# charges): it starts nothing more and answers with what it has.
USER_BUDGET = "budget"
# The run record holding what starting the run charged up front (an estimate, spent first).
PREPAID = "prepaid"


class UserSpend(Protocol):
    """Charges a run's measured spend to its user's daily budget."""

    def charge(self, principal: Principal, tokens: int) -> bool:
        """True when charged; False (nothing charged) when it would pass the user's daily budget or the
        budget store cannot say (budgets fail closed)."""


class BudgetStoreSpend:
    """`UserSpend` over the state's budget store (citadel/state), at `cost_per_1k_tokens`; listeners
    hear every charge (the gateway's spend metric, so the spend alert sees runs too)."""

    def __init__(self, budgets, cost_per_1k_tokens: float):
        self.budgets = budgets
        self.cost_per_1k_tokens = cost_per_1k_tokens
        self._listeners: list[Callable[[str, str, float], None]] = []

    def add_listener(self, listener: Callable[[str, str, float], None]) -> None:
        self._listeners.append(listener)

    def charge(self, principal: Principal, tokens: int) -> bool:
        cost = max(0, int(tokens)) / 1000.0 * self.cost_per_1k_tokens
        if cost <= 0:
            return True
        try:
            decision = self.budgets.charge(principal.tenant_id, principal.user_id, 0, cost)
        except StateUnavailable:
            return False
        if decision.allowed:
            for listener in self._listeners:
                listener(principal.tenant_id, principal.user_id, cost)
        return decision.allowed
