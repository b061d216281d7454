"""Closed forms for retry storms, retry budgets and hedging (the design's 608 / 209 / 200)."""

from __future__ import annotations

import pytest

from capacity import retrystorm

OFFERED = 190.0
ONE_OF_THREE = 1 / 3


def test_retries_at_three_layers_turn_190_into_about_608() -> None:
    attempts = retrystorm.attempts_from_retries([3, 2, 2])
    assert attempts == [4, 3, 3]
    amplification = retrystorm.every_layer_amplification(attempts, ONE_OF_THREE)
    assert amplification == pytest.approx((40 / 27) * (13 / 9) ** 2)
    # 587/s: within 5% of the design's "about 608" (3.2x), see the module docstring.
    assert OFFERED * amplification == pytest.approx(608, rel=0.05)


def test_one_layer_with_a_10_percent_budget_peaks_near_209() -> None:
    amplification = retrystorm.retry_budget_amplification(ONE_OF_THREE, max_attempts=3, budget=0.1)
    assert OFFERED * amplification == pytest.approx(209)
    # With few failures the budget does not bind: wanted retries are below 10%.
    assert retrystorm.retry_budget_amplification(0.05, 3, 0.1) == pytest.approx(1.0525)


def test_hedging_at_p95_keeps_load_near_200() -> None:
    slow = retrystorm.hedge_amplification(dead_share=0.0, quantile=0.95, budget=0.1)
    assert OFFERED * slow == pytest.approx(199.5)
    dead = retrystorm.hedge_amplification(dead_share=ONE_OF_THREE, quantile=0.95, budget=0.1)
    # A black-holed replica wants a third hedged; the 10% budget holds it at 209, within 5% of 200.
    assert OFFERED * dead == pytest.approx(200, rel=0.05)


def test_deadline_propagation_tames_the_same_retries() -> None:
    attempts = [4, 3, 3]
    propagated = retrystorm.deadline_propagated_amplification(attempts, ONE_OF_THREE)
    assert propagated == pytest.approx(1.5, rel=0.01)
    assert propagated < retrystorm.every_layer_amplification(attempts, ONE_OF_THREE)


def test_no_failures_no_amplification() -> None:
    assert retrystorm.every_layer_amplification([4, 3, 3], 0.0) == 1.0
    assert retrystorm.deadline_propagated_amplification([4, 3, 3], 0.0) == 1.0


def test_storm_loads_summary() -> None:
    loads = retrystorm.storm_loads(190, 3, 1, [3, 2, 2], 0.1, 3, 0.95, 0.1)
    assert loads["every_layer_worst_case_amplification"] == 36
    assert loads["one_layer_budget_qps"] == pytest.approx(209)
    assert loads["hedged_slow_replica_qps"] == pytest.approx(199.5)
