"""Proxies that implement Citadel's stage interfaces by calling other Serve deployments.

The gateway's AnswerService is synchronous and runs on the gateway's worker threads, so these
proxies block on `DeploymentResponse.result()` there — never on the replica's event loop, where
Serve forbids it. They take any object with Serve's handle shape, so tests can pass fakes.
"""

from __future__ import annotations

import asyncio
from functools import cached_property, partial
from typing import Any, Sequence

import numpy as np

from citadel.answer.service import QueryVectorMemo
from citadel.generation.base import Generator, approximate_tokens
from citadel.resilience.deadline import Deadline, current_deadline, time_left
from citadel.types import Passage, Principal


def deadline_epoch() -> float | None:
    """The current request's deadline as epoch seconds, for another process (None: no deadline)."""
    deadline = current_deadline()
    return None if deadline is None else deadline.epoch()


def adopted_deadline(epoch: float | None) -> Deadline | None:
    """In a stage's replica: the caller's deadline on this process's clock."""
    return None if epoch is None else Deadline.from_epoch(epoch)


def bind_handles(handles: Any, resilience: Any, *, awaited: bool = False, timeout_s: float = 30.0) -> None:
    """Make every Serve handle in `handles` (a handle, or a dict of them, nested) ready before any
    request. Serve builds a handle's router on its first use, on the event loop running then; with its
    router on that loop (serving.lean_request_path) a first use outside any loop, as from a run's worker
    thread, is refused. Handles the sync proxies call from worker threads are bound on the loop the
    replica constructs them on (its own, where it takes requests), else on the resilience loop; handles
    whose responses are awaited on the resilience loop (`awaited`: the hedged retriever reads) are
    bound there, since a response is awaited on its router's loop."""
    found = list(_handles_in(handles))

    def first_use() -> None:
        for handle in found:
            handle.options()  # Serve initialises a handle on its first options() or remote()

    async def first_use_here() -> None:
        first_use()

    try:
        asyncio.get_running_loop()
        running = True
    except RuntimeError:
        running = False
    if running and not awaited:
        first_use()
    elif found:
        resilience.run(first_use_here(), timeout_s)


def _handles_in(value: Any):
    if isinstance(value, dict):
        for item in value.values():
            yield from _handles_in(item)
    elif value is not None and hasattr(value, "options"):
        yield value


class _Proxy:
    def __init__(self, handle: Any, timeout_s: float):
        self._handle = handle
        self._timeout_s = timeout_s

    def _call(self, method: str, *args: Any, handle: Any = None, **kwargs: Any) -> Any:
        """Call a method of the deployment and wait, at most until the request's deadline."""
        target = getattr(handle or self._handle, method)
        return target.remote(*args, **kwargs).result(timeout_s=time_left(self._timeout_s))

    def _stage_call(self, method: str, *args: Any) -> Any:
        """A stage call that carries the request's deadline, so the stage's replica bounds its own
        work (a generator's HTTP call, say) by what is left."""
        return self._call(method, *args, deadline_epoch=deadline_epoch())


class RemoteEmbedder(_Proxy):
    """Embedder interface over the embedder deployment (which batches concurrent queries)."""

    @cached_property
    def _info(self) -> dict:
        return self._call("info")

    @property
    def model_id(self) -> str:
        return self._info["model_id"]

    @property
    def dim(self) -> int:
        return int(self._info["dim"])

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        if not texts:  # np.vstack refuses an empty list; the protocol's answer is a (0, dim) matrix
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.vstack([self._call("embed_query", text) for text in texts])

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._call("embed_passages", list(texts)), dtype=np.float32)


class RemoteRetriever(_Proxy):
    """Retriever interface over the retriever deployment. Each call names the tenant as its
    multiplexed model id, so Serve routes it to a replica that has the partition loaded. The query
    vector comes back with the result and goes into the gateway's memo for the confidence gate.

    Reads are hedged (a second request after the observed p95, first answer wins, the loser is
    cancelled, within a hedge budget) and retried when a replica dies (the one retry layer, within
    a retry budget). Serve's router picks the replica of each request; the hedge avoids the busy one
    because its queue is longer (power of two choices)."""

    def __init__(self, handle: Any, timeout_s: float, memo: QueryVectorMemo | None = None, resilience=None):
        super().__init__(handle, timeout_s)
        self._memo = memo
        self._resilience = resilience
        self.hedged = self.retrying = None
        if resilience is not None:
            self.hedged, self.retrying = _hedged_and_retried(self._send, resilience)

    async def _send(self, request: tuple) -> Any:
        principal = request[0]
        response = self._handle.options(multiplexed_model_id=principal.tenant_id).retrieve.remote(*request)
        try:
            return await response
        except asyncio.CancelledError:  # the hedge's loser, or the deadline: stop the work downstream
            response.cancel()
            raise

    def retrieve(self, principal: Principal, query: str, top_k: int | None = None, request_id: str | None = None):
        request = (principal, query, top_k, request_id, deadline_epoch())
        if self._resilience is None:
            routed = self._handle.options(multiplexed_model_id=principal.tenant_id)
            result, vector = self._call("retrieve", *request, handle=routed)
        else:
            result, vector = self._resilience.run(self.retrying.call(request), time_left(self._timeout_s))
        if vector is not None and self._memo is not None:
            self._memo.remember(query, np.asarray(vector, dtype=np.float32))
        return result

    def stats(self) -> dict[str, int]:
        """Cumulative counts for /metrics: reads, hedges sent, hedges that won, retries."""
        stats = {"retries": self.retrying.budget.spent_total} if self.retrying is not None else {}
        if self.hedged is not None:
            hedge = self.hedged.stats
            stats.update(requests=hedge.requests, hedges=hedge.hedges, hedge_wins=hedge.hedge_wins)
        return stats


def _retryable() -> tuple[type[BaseException], ...]:
    """A replica that died or became unreachable mid-call: worth one more try elsewhere."""
    from ray import exceptions

    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError")
    return tuple(getattr(exceptions, n) for n in names if hasattr(exceptions, n))


def _hedged_and_retried(send, resilience):
    from citadel.resilience import Hedged, MonotonicClock, RetryBudget, Retrying

    settings, clock = resilience.settings, MonotonicClock()
    hedged = None
    call = send
    if settings.hedge_enabled:
        # Two distinct callables over one handle: the hedge goes out as a second request.
        hedged = Hedged([partial(send), partial(send)], clock, quantile=settings.hedge_quantile,
                        min_delay_ms=settings.hedge_min_delay_ms, budget_share=settings.hedge_budget)
        call = hedged.call
    retrying = Retrying(call, RetryBudget(settings.retry_budget, clock), settings.retry_max_attempts, _retryable())
    return hedged, retrying


class RemoteReranker(_Proxy):
    enabled = True  # the split topology deploys a reranker only when one is configured
    @cached_property
    def model_id(self) -> str:
        return self._call("model_id")

    def rerank(self, question: str, passages: Sequence[Passage], top_n: int) -> list[Passage]:
        return self._stage_call("rerank", question, list(passages), top_n)


class RemoteGenerator(_Proxy, Generator):
    """Generator interface over the generator deployment (`generate_with_status` from the protocol)."""

    def count_tokens(self, text: str) -> int:
        """The documented approximation: the generator's own tokenizer lives in its replica, and a
        round trip per count would cost more than the precision is worth for a prompt budget."""
        return approximate_tokens(text)

    @cached_property
    def model_id(self) -> str:
        return self._call("model_id")

    def generate(self, question: str, sources, prompt=None) -> str:
        return self._stage_call("generate", question, list(sources), prompt)


class RemoteOrchestrator(_Proxy):
    """The run loop (`Orchestrator.drive`) over the orchestrator deployment (split topology). The
    gateway's RunsService calls it on its run workers and blocks until the run ends, so `timeout_s`
    is a run's whole allowance (its deadline plus the answer's synthesis), not one request's.

    A replica that dies mid-run fails this call; the run keeps its recorded steps and its lease
    expires, and the gateway's adopter starts it again here, on a live replica, which continues from
    the last recorded step."""

    def drive(self, run_id: str, owner: str):
        return self._call("drive", run_id, owner)
