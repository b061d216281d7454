"""Closed forms for the load that retries and hedges put on replicas when some replicas fail.

Notation: `failure_share` p is the share of attempts that land on a failed replica. With one of three
replicas down and the load balancer unaware of it, p = 1/3 for every attempt, retries included,
because each attempt picks a replica afresh.

**Retries at every layer** (the storm). Layers nest: an outer layer (say the gateway) calls a middle
one (the retrieval service), which calls an inner client, which calls a replica. Each layer has its
own per-try timeout and retry count, nobody propagates a deadline, and an abandoned call is not
cancelled. A dead replica black-holes the request, so the caller only learns of it by timing out.
When the per-try timeouts of the layers are equal (the common default) - or any outer timeout is no
longer than the one below it - every layer's attempt times out at the same instant as the first
replica attempt beneath it. So every layer independently sees a failure with probability p on each
attempt and retries, while the abandoned calls below keep retrying as well. A layer with `a`
attempts therefore makes 1 + p + ... + p**(a-1) calls per call it receives, and the layers multiply:

    amplification = prod over layers of (1 - p**a_l) / (1 - p)

Retries (3, 2, 2), that is attempts (4, 3, 3), with p = 1/3 give (40/27) * (13/9)**2 = 3.09: 190
searches/s become ~587 at the replicas (the design's "about 608" is 3.2x; a simulated 5-second
peak lands there). Compare deadline propagation with fast failures (`deadline_propagated_*`):
an outer layer only retries what the inner one gave up on, and the same retries cost just 1.5x.

**One retry layer with a budget**: only one layer retries, at most `max_attempts` per request, and
retries are capped at `budget` times the first attempts (a token bucket), so load is at most
(1 + budget) times the offered rate: 190 -> 209 with a 10% budget.

**Hedging after the observed quantile q** (p95): a second copy goes to another replica when the
first has not answered within the q-quantile of recent answered latencies. By construction ~(1 - q)
of healthy requests cross it, plus every request sent to a black-holed replica; a hedge budget caps
the total. A slow replica: 190 * 1.05 ~ 200. A dead one: 190 * (1 + min(budget, 1/3 + 2/3 * 0.05)).
"""

from __future__ import annotations


def attempts_from_retries(retries_per_layer: list[int]) -> list[int]:
    """Attempts per layer: the first try plus the retries."""
    return [retries + 1 for retries in retries_per_layer]


def expected_calls_one_layer(attempts: int, failure_share: float) -> float:
    """Expected calls a layer makes when each fails independently with `failure_share`.

    The k-th attempt happens only if the k-1 before it failed: sum of p**k for k < attempts.
    """
    return sum(failure_share**k for k in range(attempts))


def every_layer_amplification(attempts_per_layer: list[int], failure_share: float) -> float:
    """Replica attempts per request with retries at every layer and no deadline propagation."""
    amplification = 1.0
    for attempts in attempts_per_layer:
        amplification *= expected_calls_one_layer(attempts, failure_share)
    return amplification


def deadline_propagated_amplification(attempts_per_layer: list[int], failure_share: float) -> float:
    """Replica attempts per request when failures are fast and surface only after inner retries.

    Walk from the innermost layer out: each layer multiplies the calls below by its expected
    attempts, and passes up a failure only when all its attempts failed (p**a), so outer layers
    retry rarely.
    """
    amplification = 1.0
    layer_failure = failure_share
    for attempts in reversed(attempts_per_layer):
        amplification *= expected_calls_one_layer(attempts, layer_failure)
        layer_failure = layer_failure**attempts
    return amplification


def retry_budget_amplification(failure_share: float, max_attempts: int, budget: float) -> float:
    """One retry layer: wanted retries, capped at `budget` retries per first attempt."""
    wanted = expected_calls_one_layer(max_attempts, failure_share)
    return min(wanted, 1.0 + budget)


def hedge_amplification(dead_share: float, quantile: float, budget: float) -> float:
    """Hedging after the observed `quantile`: requests unanswered by then get one hedge, budget-capped.

    `dead_share`: share of first attempts sent to a replica that never answers (0 for a slow one,
    whose slowness just moves the observed quantile).
    """
    wanted = dead_share + (1.0 - dead_share) * (1.0 - quantile)
    return 1.0 + min(budget, wanted)


def storm_loads(
    base_qps: float,
    replicas: int,
    replicas_down: int,
    retries_per_layer: list[int],
    retry_budget: float,
    budget_max_attempts: int,
    hedge_quantile: float,
    hedge_budget: float,
) -> dict:
    """Load at the replicas under each policy, for `replicas_down` of `replicas` black-holed."""
    failure_share = replicas_down / replicas
    attempts = attempts_from_retries(retries_per_layer)
    every_layer = every_layer_amplification(attempts, failure_share)
    return {
        "base_qps": base_qps,
        "failure_share": failure_share,
        "attempts_per_layer": attempts,
        "every_layer_qps": base_qps * every_layer,
        "every_layer_amplification": every_layer,
        "every_layer_worst_case_amplification": float(_product(attempts)),
        "deadline_propagated_qps": base_qps * deadline_propagated_amplification(attempts, failure_share),
        "one_layer_budget_qps": base_qps
        * retry_budget_amplification(failure_share, budget_max_attempts, retry_budget),
        "hedged_slow_replica_qps": base_qps * hedge_amplification(0.0, hedge_quantile, hedge_budget),
        "hedged_dead_replica_qps": base_qps
        * hedge_amplification(failure_share, hedge_quantile, hedge_budget),
    }


def _product(values: list[int]) -> int:
    result = 1
    for value in values:
        result *= value
    return result
