"""A drill's verdict: each expectation of the scenario checked against what the traffic saw.

- error: a 5xx or no response, except a code the scenario expects (`permissions_unavailable` while
  the permission store is down is the guarantee, not a failure) sent from the fault's start until
  `expected_grace_s` after its end (a breaker returns in stages, refusing until it is closed);
- the fault window: requests sent from `settle_s` after the fault started until it ended (requests
  in flight across a change are not judged there, though they count for the error share);
- recovery: the seconds from the fault's start or end to the end of the last bad second (one with any
  5xx, expected or not, or a p95 over `slo_p95_ms`); 0 when no second after the reference was bad;
- a leak: a 200 inside the window that carries passages or citations while the scenario says every
  response there must be refused (`max_leaks`).
"""

from __future__ import annotations

import math
from collections import Counter

from loadtests.client import percentile
from loadtests.drills.inject import FaultLog
from loadtests.drills.scenario import DrillScenario
from loadtests.drills.traffic import Outcome

DEAD_LETTER_STATUSES = ("partial", "failed")


def is_error(outcome: Outcome, scenario: DrillScenario, log: FaultLog) -> bool:
    if outcome.status < 500:
        return False
    start, end = window(scenario, log)
    start -= scenario.settle_s
    excused = start <= outcome.sent_s <= end + scenario.expect.expected_grace_s
    return not (excused and outcome.code in scenario.expect.expected_error_codes)


def fault_bounds(scenario: DrillScenario, log: FaultLog) -> tuple[float, float]:
    """When the fault started and ended, as noted; the scenario's plan where a moment went unnoted
    (the fault side failed before it)."""
    start = log.fault_at_s if log.fault_at_s is not None else scenario.load.before_s
    end = log.fault_end_s if log.fault_end_s is not None else scenario.load.before_s + scenario.load.fault_s
    return start, end


def window(scenario: DrillScenario, log: FaultLog) -> tuple[float, float]:
    """The fault window the checks judge: from `settle_s` after the fault started to its end."""
    start, end = fault_bounds(scenario, log)
    return start + scenario.settle_s, end


def in_window(outcome: Outcome, bounds: tuple[float, float]) -> bool:
    return bounds[0] <= outcome.sent_s and outcome.done_s <= bounds[1]


def timeline(outcomes: list[Outcome], scenario: DrillScenario, log: FaultLog) -> list[dict]:
    """Per second of completion: requests, 5xx, unexpected errors, the 5xx share and p50/p95/p99 of
    the 2xx latencies."""
    seconds = max(1, math.ceil(max((o.done_s for o in outcomes), default=0.0)))
    rows = [{"t_s": second, "requests": 0, "failures_5xx": 0, "errors": 0, "latencies": []}
            for second in range(seconds)]
    for outcome in outcomes:
        row = rows[min(seconds - 1, int(outcome.done_s))]
        row["requests"] += 1
        row["failures_5xx"] += outcome.status >= 500
        row["errors"] += is_error(outcome, scenario, log)
        if outcome.status < 300:
            row["latencies"].append(outcome.latency_ms)
    for row in rows:
        latencies = row.pop("latencies")
        row["error_share"] = round(row["failures_5xx"] / row["requests"], 4) if row["requests"] else 0.0
        for name, q in (("p50_ms", 50), ("p95_ms", 95), ("p99_ms", 99)):
            row[name] = round(percentile(latencies, q), 1) if latencies else None
    return rows


def _check(name: str, passed: bool, measured, limit) -> dict:
    return {"check": name, "passed": bool(passed), "measured": measured, "limit": limit}


def recovery_s(rows: list[dict], scenario: DrillScenario, log: FaultLog) -> float:
    expect = scenario.expect
    start, end = window(scenario, log)
    reference = start - scenario.settle_s if expect.recovery_from == "fault_start" else end
    bad = [row["t_s"] + 1 for row in rows if row["t_s"] + 1 > reference and (
        row["failures_5xx"] or (expect.slo_p95_ms and row["p95_ms"] is not None and row["p95_ms"] > expect.slo_p95_ms))]
    return round(max(0.0, max(bad, default=reference) - reference), 1)


def checks(outcomes: list[Outcome], rows: list[dict], scenario: DrillScenario, log: FaultLog,
           server_retry_share: float | None) -> list[dict]:
    expect, bounds = scenario.expect, window(scenario, log)
    inside = [o for o in outcomes if in_window(o, bounds)]
    errors = sum(is_error(o, scenario, log) for o in outcomes)
    found: list[dict] = []
    if expect.max_error_share is not None:
        share = errors / len(outcomes) if outcomes else 1.0
        found.append(_check("error share", share <= expect.max_error_share, round(share, 5), expect.max_error_share))
    if expect.recovery_s is not None:
        took = recovery_s(rows, scenario, log)
        found.append(_check(f"recovery from {expect.recovery_from} (s)", took <= expect.recovery_s, took,
                            expect.recovery_s))
    if expect.fault_statuses:
        off = sum(o.status not in expect.fault_statuses for o in inside)
        found.append(_check(f"responses in the window other than {expect.fault_statuses}", inside and off == 0,
                            off, 0))
    if expect.max_leaks is not None:
        leaks = sum(o.status == 200 and o.passages > 0 for o in inside)
        found.append(_check("passages returned in the window (leaks)", inside and leaks <= expect.max_leaks, leaks,
                            expect.max_leaks))
    if expect.min_ok_share_in_fault is not None:
        share = sum(o.status == 200 for o in inside) / len(inside) if inside else 0.0
        found.append(_check("2xx share in the window", share >= expect.min_ok_share_in_fault, round(share, 4),
                            expect.min_ok_share_in_fault))
    if expect.degraded:
        # answers with sources (a refusal may never reach the stage); a cache hit computed before the
        # fault rightly carries no downgrade
        answered = [o for o in inside if o.status == 200 and o.endpoint == expect.degraded_endpoint
                    and o.passages and not o.cached]
        share = sum(expect.degraded in o.degraded for o in answered) / len(answered) if answered else 0.0
        found.append(_check(f"{expect.degraded_endpoint} 2xx flagged {expect.degraded}",
                            share >= expect.min_degraded_share, round(share, 4), expect.min_degraded_share))
    if expect.dead_letter_jobs:
        uploads = log.uploads
        dead = sum(u["status"] == 202 and u["job_status"] in DEAD_LETTER_STATUSES for u in uploads)
        found.append(_check("uploads accepted and dead-lettered", uploads and dead == len(uploads),
                            f"{dead}/{len(uploads)}", f"{len(uploads)}/{len(uploads)}"))
    if expect.max_server_retry_share is not None:
        passed = server_retry_share is not None and server_retry_share <= expect.max_server_retry_share
        found.append(_check("server retries per request", passed, server_retry_share, expect.max_server_retry_share))
    return found


def summary(outcomes: list[Outcome], duration_s: float) -> dict:
    """What a load run's summary.json holds (loadtests/run_load.py), per endpoint and over all, so
    capacity's predicted-against-measured reads drills and load runs alike."""
    def entry(rows: list[Outcome]) -> dict:
        latencies = [o.latency_ms for o in rows]
        return {"requests": len(rows), "failures": sum(o.status >= 400 for o in rows),
                "rps": round(len(rows) / duration_s, 3) if duration_s else 0.0,
                **{name: round(percentile(latencies, q), 1) for name, q in (("p50", 50), ("p95", 95), ("p99", 99))}}

    endpoints = {f"POST /v1/{name}": entry([o for o in outcomes if o.endpoint == name])
                 for name in sorted({o.endpoint for o in outcomes})}
    statuses = Counter(str(o.status) for o in outcomes)
    return {"endpoints": endpoints, "total": entry(outcomes) if outcomes else {}, "statuses": dict(sorted(statuses.items()))}
