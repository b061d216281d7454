"""Error budgets: failed answers a month allows, burn rates, and a multi-window alert table.

The arithmetic of the Google SRE workbook ("Alerting on SLOs"): an availability target T leaves an
allowed failure rate of 1 - T. A burn rate B is the observed failure rate divided by that allowance;
burning at B for a window of w hours spends B * w / (period hours) of the period's budget, assuming
traffic is spread evenly (at peak hours the same burn spends a little more).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

HOURS_PER_DAY = 24.0


@dataclass(frozen=True)
class AlertWindow:
    """One row of the alert policy: page/ticket when `budget_share` would go in `long_window_h`.

    The short window (a twelfth of the long one, per the workbook) must also be burning, so an alert
    stops soon after the problem does.
    """

    severity: str
    long_window_h: float
    short_window_h: float
    budget_share: float


# The workbook's recommended policy: 2% of a month's budget in an hour or 5% in six hours pages;
# 10% in three days opens a ticket.
DEFAULT_ALERT_WINDOWS: tuple[AlertWindow, ...] = (
    AlertWindow("page", 1.0, 5.0 / 60.0, 0.02),
    AlertWindow("page", 6.0, 0.5, 0.05),
    AlertWindow("ticket", 72.0, 6.0, 0.10),
)


def allowed_failure_rate(target: float) -> float:
    """Share of requests allowed to fail: 1 - target (0.999 -> 0.001)."""
    return 1.0 - target


def failed_answers_allowed(requests_per_day: float, target: float, period_days: float = 30) -> float:
    """Failed answers the period's budget allows (2M/day at 99.9% over 30 days -> 60,000)."""
    return requests_per_day * period_days * allowed_failure_rate(target)


def burn_rate(failure_rate: float, target: float) -> float:
    """How many times faster than allowed the budget burns (1.44% at 99.9% -> 14.4)."""
    return failure_rate / allowed_failure_rate(target)


def budget_share_used(burn: float, window_hours: float, period_days: float = 30) -> float:
    """Share of the period's budget spent by burning at `burn` for `window_hours` (14.4 x 1 h -> 2%)."""
    return burn * window_hours / (period_days * HOURS_PER_DAY)


def burn_rate_for_share(budget_share: float, window_hours: float, period_days: float = 30) -> float:
    """The burn rate that spends `budget_share` of the budget in `window_hours` (2% in 1 h -> 14.4)."""
    return budget_share * period_days * HOURS_PER_DAY / window_hours


def alert_table(
    target: float,
    requests_per_day: float,
    period_days: float = 30,
    windows: tuple[AlertWindow, ...] = DEFAULT_ALERT_WINDOWS,
) -> list[dict]:
    """The multi-window, multi-burn-rate alert table for this target and traffic."""
    rows = []
    for window in windows:
        burn = burn_rate_for_share(window.budget_share, window.long_window_h, period_days)
        failure_rate = burn * allowed_failure_rate(target)
        requests_in_window = requests_per_day * window.long_window_h / HOURS_PER_DAY
        rows.append(
            asdict(window)
            | {
                "burn_rate": burn,
                "failure_rate_threshold": failure_rate,
                "failed_answers_in_long_window": requests_in_window * failure_rate,
            }
        )
    return rows


def error_budget_report(target: float, requests_per_day: float, period_days: float = 30) -> dict:
    """Everything `plan` prints about the error budget, as one JSON-able mapping."""
    return {
        "target": target,
        "period_days": period_days,
        "allowed_failure_rate": allowed_failure_rate(target),
        "failed_answers_per_month": failed_answers_allowed(requests_per_day, target, period_days),
        "alerts": alert_table(target, requests_per_day, period_days),
    }
