"""Load client primitives: closed-loop HTTP workers (`drive`), what each request came back with
(`Completion`, `LoadRun`) and the one percentile function the reports use.

Identity is not minted here: the caller passes `headers_for(worker, tenant) -> dict`, so a worker's
credential and user context come from whoever owns them (a benchmark's own service, a real app).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import httpx

MS = 1000.0
HTTP_TIMEOUT_S = 60.0
# The status recorded when a request got no HTTP response at all (connection reset, timeout): a
# server-side failure from the client's point of view, so it counts with the 5xx.
NO_RESPONSE = 599

HeadersFor = Callable[[int, str | None], dict]  # (worker, tenant or None) -> request headers


@dataclass
class Completion:
    t_s: float  # since the start of the run, when the response arrived
    latency_ms: float
    status: int
    body: dict | None = None


@dataclass
class LoadRun:
    """The completions of one run, timed from `started` (which a caller may reset after a warm-up)."""

    started: float = field(default_factory=time.monotonic)
    completions: list[Completion] = field(default_factory=list)

    def since(self) -> float:
        return time.monotonic() - self.started


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (1-99) of `values`, interpolated between the closest ranks; 0 when there are none."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


async def drive(url: str | Sequence[str], headers_for: HeadersFor, run: LoadRun, path: str,
                body_of: Callable[[int], dict], concurrency: int, duration_s: float, keep_bodies: bool = False,
                tenant: str | None = None, timeout_s: float = HTTP_TIMEOUT_S) -> list[Completion]:
    """`concurrency` clients POSTing `body_of(turn)` to `path` back to back for `duration_s`; each
    worker sends `headers_for(worker, tenant)`. Several URLs (replicas answering HTTP themselves): worker
    i keeps to URL i mod n, as a client-side balancer would. Appends to `run` and returns this call's
    completions."""
    urls = [url] if isinstance(url, str) else list(url)
    first = len(run.completions)
    per_url = -(-concurrency // len(urls))
    limits = httpx.Limits(max_connections=per_url, max_keepalive_connections=per_url)
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(httpx.AsyncClient(base_url=u, timeout=timeout_s, limits=limits))
                   for u in urls]
        stop_at = time.monotonic() + duration_s
        await asyncio.gather(*(_worker(clients[index % len(clients)], run, path, body_of, headers_for(index, tenant),
                                       index, stop_at, keep_bodies) for index in range(concurrency)))
    return run.completions[first:]


async def _worker(client: httpx.AsyncClient, run: LoadRun, path: str, body_of: Callable[[int], dict],
                  headers: dict, turn: int, stop_at: float, keep_bodies: bool) -> None:
    """One closed-loop client: the next request leaves when the previous one is answered. Turns start
    at the worker's index so concurrent workers do not all send the same body at once."""
    while time.monotonic() < stop_at:
        started = time.monotonic()
        try:
            response = await client.post(path, json=body_of(turn), headers=headers)
            status, body = response.status_code, (_json_or_none(response) if keep_bodies else None)
        except httpx.HTTPError:
            status, body = NO_RESPONSE, None
        turn += 1
        run.completions.append(Completion(run.since(), (time.monotonic() - started) * MS, status, body))


def _json_or_none(response: httpx.Response) -> dict | None:
    """A kept body; an error page that is not JSON (a proxy's 502) is kept as None rather than
    aborting the worker."""
    try:
        return response.json()
    except ValueError:
        return None
