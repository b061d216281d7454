"""The one retry layer (DESIGN.md §5): retry a failed call while a retry budget allows.

Only one layer retries (the retrieval service); the wrappers below and above it propagate errors,
so retries never multiply across layers. Deadline and breaker refusals are never retried: trying
again cannot help and would only add load.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from citadel.resilience.breaker import BreakerOpen
from citadel.resilience.budget import DEFAULT_WINDOW_S, ShareBudget
from citadel.resilience.clock import Clock
from citadel.resilience.deadline import Deadline, DeadlineExceeded

Req = TypeVar("Req")
Resp = TypeVar("Resp")

NEVER_RETRIED: tuple[type[BaseException], ...] = (DeadlineExceeded, BreakerOpen)


class RetryBudget(ShareBudget):
    """Retries <= share x requests within the last `window_s` seconds."""

    def __init__(self, share: float, clock: Clock, window_s: float = DEFAULT_WINDOW_S):
        super().__init__(share, clock, window_s)

    def can_retry(self) -> bool:
        """True (and one retry consumed) when a retry fits in the budget."""
        return self.try_spend()


async def retry(call: Callable[[Req], Awaitable[Resp]], request: Req, budget: RetryBudget, max_attempts: int,
                retry_on: tuple[type[BaseException], ...] = (Exception,), deadline: Deadline | None = None) -> Resp:
    """Call, and on a retryable error call again (up to max_attempts in all) while budget and deadline allow."""
    if max_attempts < 1:
        raise ValueError("max_attempts must be >= 1")
    budget.record_request()
    attempt = 1
    while True:
        try:
            return await call(request)
        except retry_on as error:
            if (isinstance(error, NEVER_RETRIED) or attempt >= max_attempts
                    or (deadline is not None and deadline.expired()) or not budget.can_retry()):
                raise
            attempt += 1


class Retrying:
    """`retry` as a wrapper: `await Retrying(...).call(request)`."""

    def __init__(self, call: Callable[[Any], Awaitable[Any]], budget: RetryBudget, max_attempts: int,
                 retry_on: tuple[type[BaseException], ...] = (Exception,)):
        self._call = call
        self.budget = budget
        self.max_attempts = max_attempts
        self.retry_on = retry_on

    async def call(self, request: Any, deadline: Deadline | None = None) -> Any:
        return await retry(self._call, request, self.budget, self.max_attempts, self.retry_on, deadline)
