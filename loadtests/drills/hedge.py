"""The hedge drill's measurement (DESIGN.md §5: hedged reads): /v1/retrieve under load with one
retriever replica slowed, p50/p99 and what the hedges cost.

The cases (`HEDGE_CASES`) differ in two switches of the deployment under test — hedging, and
latency-aware (outlier) routing — so the orchestrator starts a fresh cluster per case with those set,
slows one replica with `control.set_fault(..., replicas=[rank])` for every case but "healthy", and
calls `hedge_case`. The "healthy" case runs first: its p50 sets how much latency the slow replica gets.
"""

from __future__ import annotations

import asyncio

from loadtests.client import HeadersFor, LoadRun, drive, percentile
from loadtests.drills.control import metric_value
from loadtests.drills.workload import RETRIEVE_PATH, retrieve_body

# (case, hedging, latency-aware routing): healthy, slow with and without hedging, then each
# mechanism's share (hedging with Serve's stock routing, and neither).
HEDGE_CASES = (("healthy", True, True), ("slow_hedge", True, True), ("slow_nohedge", False, True),
               ("slow_hedge_stock_routing", True, False), ("slow_stock", False, False))
REPORT_ORDER = ("healthy", "slow_nohedge", "slow_hedge", "slow_hedge_stock_routing", "slow_stock")
SLOW_FACTOR = 10.0
SLOW_CUT_OF_ADDED = 0.8  # a response slower than 80% of the added latency went through the slow replica
HEDGES = "citadel_retriever_hedges_total"
HEDGE_WINS = "citadel_retriever_hedge_wins_total"
RETRIES = "citadel_retriever_retries_total"


def added_latency_ms(healthy_row: dict) -> float:
    """The latency to add to one replica so that it answers ~SLOW_FACTOR times slower than healthy."""
    return max(healthy_row["p50_ms"], 1.0) * (SLOW_FACTOR - 1)


def hedge_case(url: str, metrics_token: str, headers_for: HeadersFor, name: str, concurrency: int,
               warmup_s: float, duration_s: float, slow_ms: float = 0.0) -> dict:
    """A warm-up, then `duration_s` of /v1/retrieve load; the row of this case. `slow_ms` is the
    latency added to the slow replica (0 for the healthy case)."""
    asyncio.run(drive(url, headers_for, LoadRun(), RETRIEVE_PATH, retrieve_body, concurrency, warmup_s))
    before = {name_: metric_value(url, metrics_token, name_) for name_ in (HEDGES, HEDGE_WINS, RETRIES)}
    done = asyncio.run(drive(url, headers_for, LoadRun(), RETRIEVE_PATH, retrieve_body, concurrency, duration_s))
    moved = {name_: metric_value(url, metrics_token, name_) - value for name_, value in before.items()}
    extra = moved[HEDGES] + moved[RETRIES]  # every request beyond the one each client sent
    ok = [c.latency_ms for c in done if c.status == 200]
    slow_cut = SLOW_CUT_OF_ADDED * slow_ms if slow_ms else float("inf")
    return {"case": name, "p50_ms": round(percentile(ok, 50), 2), "p99_ms": round(percentile(ok, 99), 2),
            "requests": len(done), "extra_requests": int(extra), "hedge_wins": int(moved[HEDGE_WINS]),
            "slow_responses": sum(latency > slow_cut for latency in ok),
            "extra_share": round(extra / len(done), 4) if done else 0.0,
            "errors": sum(c.status != 200 for c in done)}


def hedge_report(rows: list[dict], slow_ms: float, concurrency: int) -> dict:
    """The drill's JSON report: the rows in REPORT_ORDER and slow-with-hedging p99 over healthy."""
    rows = sorted(rows, key=lambda r: REPORT_ORDER.index(r["case"]))
    by_case = {r["case"]: r for r in rows}
    return {"rows": rows, "slow_replica_added_ms": round(slow_ms, 1), "concurrency": concurrency,
            "p99_slow_hedge_vs_healthy": round(by_case["slow_hedge"]["p99_ms"]
                                               / max(by_case["healthy"]["p99_ms"], 1e-9), 3)}
