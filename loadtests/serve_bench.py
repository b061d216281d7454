"""The serve benchmark driver: one cell (a topology at one concurrency) measured over HTTP against a
URL, or in-process against a plain callable, tallied into the same row; and the ratios of each
topology to the in-process floor.

A row is `{topology, concurrency, p50_ms, p95_ms, p99_ms, rps, requests, errors, errors_5xx}`: the
latencies are those of successful requests only, `errors` counts every failure and `errors_5xx` the
server-side ones. Starting the topologies and minting identities is the orchestrator's part
(benchmarks/serve_bench.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from loadtests.client import MS, HeadersFor, LoadRun, drive, percentile

QUESTIONS = [
    "What is the hotel limit per night in London?",
    "How much is reimbursed for home office equipment?",
    "Who approves expenses above the limit?",
    "What standard discount can sales offer?",
    "How many days per week may staff work remotely?",
    "What is the per diem for meals when travelling?",
    "How do I report a lost laptop?",
    "What is the parental leave policy for contractors in Brazil?",
]
ANSWER_PATH = "/v1/answer"
PERCENTILES = (50, 95, 99)
OK = 200

# In-process: `call(worker, turn)` asks one question and raises on failure; `status_of(error)` says
# which HTTP status that failure stands for (4xx the caller's, 5xx the server's), or None for an
# error that is not a measured outcome (a bug), which then propagates.
InProcessCall = Callable[[int, int], None]
StatusOf = Callable[[BaseException], int | None]


@dataclass
class Cell:
    topology: str
    concurrency: int
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    errors_5xx: int = 0
    seconds: float = 0.0

    def record(self, status: int, latency_ms: float) -> None:
        if status == OK:
            self.latencies_ms.append(latency_ms)
        else:
            self.errors += 1
            self.errors_5xx += status >= 500

    def row(self) -> dict:
        p50, p95, p99 = (round(percentile(self.latencies_ms, q), 2) for q in PERCENTILES)
        return {"topology": self.topology, "concurrency": self.concurrency,
                "p50_ms": p50, "p95_ms": p95, "p99_ms": p99,
                "rps": round(len(self.latencies_ms) / self.seconds, 2) if self.seconds else 0.0,
                "requests": len(self.latencies_ms), "errors": self.errors, "errors_5xx": self.errors_5xx}


def question_body(turn: int) -> dict:
    """The questions in turn: every worker walks the same list from its own starting point."""
    return {"question": QUESTIONS[turn % len(QUESTIONS)]}


# ---------------------------------------------------------------------- over HTTP
def http_cell(url: str | Sequence[str], headers_for: HeadersFor, topology: str, concurrency: int,
              duration_s: float) -> Cell:
    """`concurrency` clients asking /v1/answer at `url` (or spread over several) for `duration_s`, tallied
    into a cell."""
    cell = Cell(topology, concurrency)
    started = time.perf_counter()
    done = asyncio.run(drive(url, headers_for, LoadRun(), ANSWER_PATH, question_body, concurrency, duration_s))
    cell.seconds = time.perf_counter() - started
    for completion in done:
        cell.record(completion.status, completion.latency_ms)
    return cell


def measure_http(url: str | Sequence[str], headers_for: HeadersFor, topology: str, concurrency: int, warmup_s: float,
                 duration_s: float) -> dict:
    """A warm-up (discarded: connections, caches, autoscaling) then the measured cell's row."""
    if warmup_s > 0:
        http_cell(url, headers_for, topology, concurrency, warmup_s)
    return http_cell(url, headers_for, topology, concurrency, duration_s).row()


def floor_ms(url: str, path: str = "/healthz", requests: int = 200) -> float:
    """p50 of a GET that does no work (the health route) from one client: what the HTTP hop and, under
    Serve, the proxy and one replica call cost by themselves."""
    import httpx

    latencies = []
    with httpx.Client(base_url=url, timeout=10.0) as client:
        for _ in range(requests):
            started = time.perf_counter()
            client.get(path).raise_for_status()
            latencies.append((time.perf_counter() - started) * MS)
    return round(percentile(latencies[10:], 50), 2)


# ---------------------------------------------------------------------- in-process
def inprocess_cell(call: InProcessCall, status_of: StatusOf, concurrency: int, duration_s: float,
                   topology: str = "inprocess") -> Cell:
    """`concurrency` threads calling `call` back to back for `duration_s`, tallied into a cell."""
    cell = Cell(topology, concurrency)
    lock = threading.Lock()
    stop_at = time.perf_counter() + duration_s

    def worker(index: int) -> None:
        turn = index
        while time.perf_counter() < stop_at:
            status, elapsed = _timed(call, status_of, index, turn)
            turn += 1
            with lock:
                cell.record(status, elapsed)

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(worker, range(concurrency)))  # list(): a worker's unexpected error surfaces here
    cell.seconds = time.perf_counter() - started
    return cell


def _timed(call: InProcessCall, status_of: StatusOf, worker: int, turn: int) -> tuple[int, float]:
    """(status, elapsed ms) of one call: 200, or the status its error stands for."""
    started = time.perf_counter()
    try:
        call(worker, turn)
        status = OK
    except Exception as error:
        status = status_of(error)
        if status is None:
            raise
    return status, (time.perf_counter() - started) * MS


def measure_inprocess(call: InProcessCall, status_of: StatusOf, concurrency: int, warmup_s: float,
                      duration_s: float) -> dict:
    """A warm-up (discarded) then the measured in-process cell's row."""
    if warmup_s > 0:
        inprocess_cell(call, status_of, concurrency, warmup_s)
    return inprocess_cell(call, status_of, concurrency, duration_s).row()


# ---------------------------------------------------------------------- comparison
def ratios(rows: list[dict]) -> list[dict]:
    """Per concurrency: p50 of each HTTP topology over in-process, and throughput over in-process."""
    by = {(r["topology"], r["concurrency"]): r for r in rows}
    out = []
    for (topology, concurrency), row in sorted(by.items()):
        base = by.get(("inprocess", concurrency))
        if topology == "inprocess" or base is None or not base["p50_ms"] or not base["rps"]:
            continue
        out.append({"topology": topology, "concurrency": concurrency,
                    "p50_vs_inprocess": round(row["p50_ms"] / base["p50_ms"], 3),
                    "rps_vs_inprocess": round(row["rps"] / base["rps"], 3)})
    return out
