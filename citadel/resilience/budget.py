"""A budget of extra calls (hedges, retries) as a share of requests over a sliding window.

An extra call is allowed only when it keeps spent + 1 <= share x requests within the window: no
burst allowance, so a storm of slow or failing calls can add at most `share` more load. Because each
grant holds for the window that ends at it, the bound also holds cumulatively (cover the grants with
disjoint windows, latest first). A window instead of a lifetime total stops a long quiet spell from
banking credit for a later burst.
"""

from __future__ import annotations

from citadel.resilience.clock import Clock
from citadel.resilience.sketch import DEFAULT_BUCKETS, WindowedCounter

DEFAULT_WINDOW_S = 10.0


class ShareBudget:
    """Extra calls allowed as a share of the requests seen in the last `window_s` seconds."""

    def __init__(self, share: float, clock: Clock, window_s: float = DEFAULT_WINDOW_S,
                 buckets: int = DEFAULT_BUCKETS):
        if not 0 <= share <= 1:
            raise ValueError("share must be in [0, 1]")
        self.share = share
        self._clock = clock
        self._requests = WindowedCounter(window_s, buckets)
        self._spent = WindowedCounter(window_s, buckets)
        self.requests_total = 0
        self.spent_total = 0

    def record_request(self) -> None:
        self._requests.add(self._clock.now())
        self.requests_total += 1

    def allows(self) -> bool:
        """Whether one more extra call fits now (spends nothing)."""
        now = self._clock.now()
        return self._spent.total(now) + 1 <= self.share * self._requests.total(now)

    def try_spend(self) -> bool:
        """Take one extra call from the budget if it stays within the share; False otherwise."""
        if self.allows():
            self._spent.add(self._clock.now())
            self.spent_total += 1
            return True
        return False
