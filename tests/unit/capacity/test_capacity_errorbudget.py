"""Error budgets and the multi-window alert table (Google SRE workbook arithmetic)."""

from __future__ import annotations

import pytest

from capacity import errorbudget


def test_99_9_percent_of_2m_a_day_leaves_60k_failures_a_month() -> None:
    assert errorbudget.failed_answers_allowed(2_000_000, 0.999, period_days=30) == pytest.approx(60_000)


def test_1_44_percent_failing_burns_14_4x_and_an_hour_uses_2_percent() -> None:
    burn = errorbudget.burn_rate(0.0144, 0.999)
    assert burn == pytest.approx(14.4)
    assert errorbudget.budget_share_used(burn, window_hours=1) == pytest.approx(0.02)


def test_6x_for_six_hours_uses_5_percent() -> None:
    assert errorbudget.budget_share_used(6.0, window_hours=6) == pytest.approx(0.05)


def test_alert_table_is_the_workbook_policy() -> None:
    rows = errorbudget.alert_table(0.999, 2_000_000)
    assert [(r["severity"], r["long_window_h"]) for r in rows] == [("page", 1.0), ("page", 6.0), ("ticket", 72.0)]
    assert [r["burn_rate"] for r in rows] == pytest.approx([14.4, 6.0, 1.0])
    assert rows[0]["failure_rate_threshold"] == pytest.approx(0.0144)
    # An hour at 14.4x fails 1,200 answers: 2% of the 60,000.
    assert rows[0]["failed_answers_in_long_window"] == pytest.approx(1_200)
    for row in rows:
        assert row["short_window_h"] == pytest.approx(row["long_window_h"] / 12)


def test_report_carries_failed_answers_per_month() -> None:
    report = errorbudget.error_budget_report(0.999, 2_000_000)
    assert report["failed_answers_per_month"] == pytest.approx(60_000)
    assert report["allowed_failure_rate"] == pytest.approx(0.001)
