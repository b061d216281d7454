"""A drill's traffic: closed-loop workers sending retrieve and answer requests in the scenario's mix,
each as a user of the load population (a tenant and user drawn by Zipf rank, a user context minted
per request from the calling service's key), with optional immediate client retries of a 5xx (the
retry-storm drill). Every request is recorded with what the verdict needs: when it left and came
back, its status and error code, how many passages it returned and its degraded flags.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import httpx

from loadtests.client import NO_RESPONSE
from loadtests.drills.scenario import DrillLoad
from loadtests.population import LoadSettings, Population, mint_user_context

PATHS = {"retrieve": "/v1/retrieve", "answer": "/v1/answer"}
# Function words a question's relevance ignores: a number spelled in them makes each question new to
# the answer cache without changing what it asks (a "(case 12)" tag would, and is refused as off-topic).
FILLER_WORDS = ("please", "just", "now", "so", "then", "here", "very", "also")
FILLER_DIGITS = 6  # 8**6 distinct questions per base question


def numbered(question: str, number: int) -> str:
    words = []
    for _ in range(FILLER_DIGITS):
        number, digit = divmod(number, len(FILLER_WORDS))
        words.append(FILLER_WORDS[digit])
    return f"{question} {' '.join(words)}"


@dataclass
class Outcome:
    endpoint: str
    sent_s: float  # since the drill started
    done_s: float
    status: int
    code: str | None = None
    passages: int = 0
    degraded: tuple[str, ...] = ()
    attempts: int = 1
    cached: bool = False

    @property
    def latency_ms(self) -> float:
        return (self.done_s - self.sent_s) * 1000.0


@dataclass
class Traffic:
    started: float = field(default_factory=time.monotonic)
    outcomes: list[Outcome] = field(default_factory=list)

    def since(self) -> float:
        return time.monotonic() - self.started


def request_headers(settings: LoadSettings, identity) -> dict:
    return {"authorization": f"Bearer {settings.service_token}",
            "x-citadel-user-context": mint_user_context(settings, identity, time.time())}


def _body(endpoint: str, question: str, load: DrillLoad) -> dict:
    return {"query": question, "top_k": load.top_k} if endpoint == "retrieve" else {"question": question}


def _read(response: httpx.Response, outcome: Outcome) -> None:
    """The error code, passages or citations returned, degraded flags and cache hit of a response."""
    outcome.status = response.status_code
    try:
        body = response.json()
    except ValueError:
        return
    if not isinstance(body, dict):
        return
    error = body.get("error")
    outcome.code = error.get("code") if isinstance(error, dict) else None
    outcome.passages = len(body.get("passages") or []) + len(body.get("citations") or [])
    outcome.degraded = tuple(body.get("degraded") or ())
    outcome.cached = bool(body.get("cached"))


async def _send(client: httpx.AsyncClient, settings: LoadSettings, identity, outcome: Outcome, body: dict,
                retries: int) -> None:
    """Send, and resend a 5xx up to `retries` times at once (what a careless client does)."""
    while True:
        try:
            response = await client.post(PATHS[outcome.endpoint], json=body, headers=request_headers(settings, identity))
            _read(response, outcome)
        except httpx.HTTPError:
            outcome.status, outcome.code = NO_RESPONSE, None
        if outcome.status < 500 or outcome.attempts > retries:
            return
        outcome.attempts += 1


async def _worker(client: httpx.AsyncClient, settings: LoadSettings, load: DrillLoad, traffic: Traffic,
                  index: int, seed: int, stop_at: float) -> None:
    rng = random.Random(seed * 1_000 + index)
    identity = Population(settings.workload, seed * 1_000 + index).draw()
    endpoints, weights = zip(*load.mix.items())
    turn = 0
    while time.monotonic() < stop_at:
        turn += 1
        endpoint = rng.choices(endpoints, weights)[0]
        question = rng.choice(identity.questions)
        if load.vary_questions:
            question = numbered(question, turn * load.concurrency + index)
        outcome = Outcome(endpoint, traffic.since(), 0.0, NO_RESPONSE)
        await _send(client, settings, identity, outcome, _body(endpoint, question, load), load.client_retries)
        outcome.done_s = traffic.since()
        traffic.outcomes.append(outcome)
        if load.think_s:
            await asyncio.sleep(rng.uniform(0.5, 1.5) * load.think_s)


async def run_traffic(settings: LoadSettings, load: DrillLoad, traffic: Traffic, seed: int) -> None:
    """`load.concurrency` workers for `load.total_s` from now; outcomes go into `traffic`."""
    limits = httpx.Limits(max_connections=load.concurrency, max_keepalive_connections=load.concurrency)
    async with httpx.AsyncClient(base_url=settings.url, timeout=load.timeout_s, limits=limits) as client:
        stop_at = time.monotonic() + load.total_s
        await asyncio.gather(*(_worker(client, settings, load, traffic, index, seed, stop_at)
                               for index in range(load.concurrency)))
