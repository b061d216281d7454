"""A Ray Serve deployment handle without Ray, as httpx's MockTransport is a network without sockets.

The proxies of serving/ray/remote.py call `handle.<method>.remote(*args, **kwargs)` (after
`handle.options(multiplexed_model_id=tenant)` for the retriever) and wait on the response's
`.result(timeout_s=...)`, or await it and `.cancel()` it (the retriever's hedged reads). Here the
call reaches a replica object built from an in-process backend with the deployment's method shapes
(serving/ray/app.py), and its arguments and result are pickled both ways, as between Serve's
processes, so a proxy that hands over something that would not cross a process boundary fails here.
The conformance suites run each Remote* proxy over one of these (tests/conformance/test_*.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import pickle
from typing import Any

import numpy as np

from citadel.resilience.deadline import deadline_scope

_MULTIPLEXED_MODEL_ID: contextvars.ContextVar[str] = contextvars.ContextVar("multiplexed_model_id", default="")


def multiplexed_model_id() -> str:
    """In a fake replica: the model id the call was routed by (`serve.get_multiplexed_model_id()`)."""
    return _MULTIPLEXED_MODEL_ID.get()


def _across_processes(value: Any) -> Any:
    return pickle.loads(pickle.dumps(value))


class FakeResponse:
    """A finished `DeploymentResponse`: `.result()` returns or raises what the replica did."""

    def __init__(self, value: Any = None, error: BaseException | None = None):
        self._value, self._error = value, error
        self.cancelled = False

    def result(self, timeout_s: float | None = None) -> Any:
        assert timeout_s is None or timeout_s > 0, f"waited with no time left ({timeout_s})"
        if self._error is not None:
            raise self._error
        return self._value

    def cancel(self) -> None:
        self.cancelled = True

    def __await__(self):
        yield from asyncio.sleep(0).__await__()
        return self.result()


class FakeServeHandle:
    """Calls reach `replica`; `calls` lists (method, multiplexed model id) in order, shared by options()."""

    def __init__(self, replica: Any, model_id: str = "", calls: list | None = None):
        self._replica = replica
        self._model_id = model_id
        self.calls: list[tuple[str, str]] = [] if calls is None else calls

    def options(self, *, multiplexed_model_id: str = "", **_: Any) -> "FakeServeHandle":
        return FakeServeHandle(self._replica, multiplexed_model_id, self.calls)

    def __getattr__(self, method: str) -> "_Method":
        if method.startswith("_"):
            raise AttributeError(method)
        return _Method(self, method)

    def _invoke(self, method: str, args: tuple, kwargs: dict) -> FakeResponse:
        self.calls.append((method, self._model_id))
        args, kwargs = _across_processes((args, kwargs))
        token = _MULTIPLEXED_MODEL_ID.set(self._model_id)
        try:
            value = getattr(self._replica, method)(*args, **kwargs)
        except Exception as error:  # raised to the caller, as Serve re-raises a replica's error
            return FakeResponse(error=error)
        finally:
            _MULTIPLEXED_MODEL_ID.reset(token)
        return FakeResponse(_across_processes(value))


class _Method:
    def __init__(self, handle: FakeServeHandle, name: str):
        self._handle, self._name = handle, name

    def remote(self, *args: Any, **kwargs: Any) -> FakeResponse:
        return self._handle._invoke(self._name, args, kwargs)


# ---------------------------------------------------------------------- replicas: serving/ray/app.py's shapes
def _within(deadline_epoch: float | None):
    from serving.ray.remote import adopted_deadline

    return deadline_scope(adopted_deadline(deadline_epoch))


class EmbedderReplica:
    """The embedder deployment: one query per call (Serve batches them), passages as a batch."""

    def __init__(self, embedder):
        self._embedder = embedder

    def embed_query(self, text: str) -> np.ndarray:
        return self._embedder.embed_queries([text])[0]

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._embedder.embed_passages(texts)

    def info(self) -> dict:
        return {"model_id": self._embedder.model_id, "dim": self._embedder.dim}


class RetrieverReplica:
    """The retriever deployment: refuses a call not routed by the caller's tenant, and hands back the
    query's vector from its memo with the result."""

    def __init__(self, retriever, memo=None):
        self._retriever, self._memo = retriever, memo

    def retrieve(self, principal, query: str, top_k: int | None, request_id: str | None,
                 deadline_epoch: float | None = None):
        if multiplexed_model_id() != principal.tenant_id:
            raise ValueError("retriever call not routed by the caller's tenant")
        with _within(deadline_epoch):
            result = self._retriever.retrieve(principal, query, top_k, request_id)
        return result, (self._memo.recall(query) if self._memo is not None else None)


class RerankerReplica:
    def __init__(self, reranker):
        self._reranker = reranker

    def model_id(self) -> str:
        return self._reranker.model_id

    def rerank(self, question: str, passages: list, top_n: int, deadline_epoch: float | None = None) -> list:
        with _within(deadline_epoch):
            return self._reranker.rerank(question, passages, top_n)


class GeneratorReplica:
    def __init__(self, generator):
        self._generator = generator

    def model_id(self) -> str:
        return self._generator.model_id

    def generate(self, question: str, sources: list, prompt=None, deadline_epoch: float | None = None) -> str:
        with _within(deadline_epoch):
            return self._generator.generate(question, sources, prompt)


class OrchestratorReplica:
    """The orchestrator deployment: drives under the caller's owner id suffixed with its replica's."""

    def __init__(self, orchestrator, replica: str = "replica-0"):
        self._orchestrator, self._replica = orchestrator, replica

    def drive(self, run_id: str, owner: str):
        return self._orchestrator.drive(run_id, f"{owner}/{self._replica}")
