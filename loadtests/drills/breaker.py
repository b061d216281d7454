"""The breaker drill (DESIGN.md §5: latency circuit breakers): /v1/answer under steady load while the
generator is slowed for a while and then restored; when the generator's breaker tripped, p95 per
window, the staged return, and the 5xx count.

`breaker_drill` runs the whole scenario against a running app at `url` (fault injection on, the
admin token a platform admin's, the metrics token accepted by /metrics).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

from loadtests.client import HeadersFor, LoadRun, drive, percentile
from loadtests.drills.control import clear_fault, metric_value, set_fault
from loadtests.drills.workload import ANSWER_PATH, ANSWER_TENANT, answer_body

WINDOW_S = 10.0
PRIMING_S = 3.0  # unmeasured load first: connections open and every stage warm
WATCH_EVERY_S = 0.5
BREAKER = "generator"
BREAKER_STATES = ("open", "half_open", "recovering", "closed")
TRANSITIONS = "citadel_breaker_transitions_total"
FALLBACK = "generator_fallback"


def breaker_drill(url: str, admin_token: str, metrics_token: str, headers_for: HeadersFor, concurrency: int,
                  before_s: float, fault_s: float, after_s: float, slow_ms: float, slo_ms: float,
                  log: Callable[[dict], None] = print) -> dict:
    """Load for before+fault+after seconds; the generator gets `slow_ms` of latency from `before_s`
    for `fault_s`. Returns the report (see `breaker_report`)."""
    asyncio.run(drive(url, headers_for, LoadRun(), ANSWER_PATH, answer_body, concurrency, PRIMING_S,
                      tenant=ANSWER_TENANT))
    run = LoadRun()
    marks: dict[str, float] = {}
    transitions: list[dict] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_breaker, args=(url, metrics_token, run, transitions, stop),
                               daemon=True, name="breaker-watch")
    director = threading.Thread(target=_fault_window, daemon=True, name="breaker-fault",
                                args=(url, admin_token, run, marks, before_s, fault_s, slow_ms, log))
    watcher.start()
    director.start()
    asyncio.run(drive(url, headers_for, run, ANSWER_PATH, answer_body, concurrency, before_s + fault_s + after_s,
                      keep_bodies=True, tenant=ANSWER_TENANT))
    director.join()
    stop.set()
    watcher.join()
    return breaker_report(run, marks, transitions, slo_ms)


def _fault_window(url: str, admin_token: str, run: LoadRun, marks: dict, before_s: float, fault_s: float,
                  slow_ms: float, log: Callable[[dict], None]) -> None:
    """Beside the load: wait, slow the generator, wait, restore it; note both times."""
    time.sleep(before_s)
    set_fault(url, admin_token, BREAKER, latency_ms=slow_ms)
    marks["fault_at_s"] = run.since()
    log({"event": "fault set", "t_s": round(marks["fault_at_s"], 1)})
    time.sleep(fault_s)
    clear_fault(url, admin_token, BREAKER)
    marks["fault_cleared_s"] = run.since()
    log({"event": "fault cleared", "t_s": round(marks["fault_cleared_s"], 1)})


def _watch_breaker(url: str, metrics_token: str, run: LoadRun, transitions: list[dict],
                   stop: threading.Event) -> None:
    """Poll the generator breaker's transition counters; note when each one moves."""
    seen: dict[str, float] = {}
    while not stop.wait(WATCH_EVERY_S):
        for state in BREAKER_STATES:
            count = metric_value(url, metrics_token, TRANSITIONS, f'{{breaker="{BREAKER}",to="{state}"}}')
            if count > seen.get(state, 0):
                transitions.append({"t_s": round(run.since(), 1), "to": state, "count": int(count)})
                seen[state] = count


def breaker_windows(run: LoadRun) -> list[dict]:
    """p95 of the successful answers, request count and fallback answers per WINDOW_S window."""
    windows = []
    end = max((c.t_s for c in run.completions), default=0.0)
    start = 0.0
    while start < end:
        inside = [c for c in run.completions if start <= c.t_s < start + WINDOW_S]
        latencies = [c.latency_ms for c in inside if c.status == 200]
        fallback = sum(1 for c in inside if c.body and FALLBACK in c.body.get("degraded", []))
        windows.append({"t_s": round(start, 1), "p95_ms": round(percentile(latencies, 95), 1),
                        "requests": len(inside), "fallback_answers": fallback})
        start += WINDOW_S
    return windows


def breaker_report(run: LoadRun, marks: dict, transitions: list[dict], slo_ms: float) -> dict:
    """When the breaker first opened after the fault, and the end of the first window after the fault
    whose p95 is within the SLO again."""
    fault_at = marks.get("fault_at_s", 0.0)
    windows = breaker_windows(run)
    tripped = next((t["t_s"] for t in transitions if t["to"] == "open" and t["t_s"] >= fault_at), None)
    recovered = next((w["t_s"] + WINDOW_S for w in windows
                      if w["t_s"] >= fault_at and w["p95_ms"] <= slo_ms and w["requests"]), None)
    return {"slo_ms": slo_ms, "fault_at_s": round(fault_at, 1),
            "fault_cleared_s": round(marks.get("fault_cleared_s", 0), 1),
            "tripped_at_s": tripped, "recovered_at_s": recovered,
            "recovered_within_s": round(recovered - fault_at, 1) if recovered is not None else None,
            "errors_5xx": sum(c.status >= 500 for c in run.completions), "requests": len(run.completions),
            "windows": windows, "transitions": transitions}
