"""A run's spend (DESIGN.md §10, stopping rule 2): tokens of prompts and outputs, and their estimated cost.

Tokens are counted with the same cheap counter chunking uses (words and punctuation marks), or the
server's own `usage` when a model reports one. The meter is shared by the steps of a round running
in parallel, hence its lock; a resumed run starts it from the spend recorded with each finished step.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from citadel.chunking import count_tokens

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
