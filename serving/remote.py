"""Proxies that implement Citadel's stage interfaces by calling other Serve deployments.

The gateway's AnswerService is synchronous and runs on the gateway's worker threads, so these
proxies block on `DeploymentResponse.result()` there — never on the replica's event loop, where
Serve forbids it. They take any object with Serve's handle shape, so tests can pass fakes.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Sequence

import numpy as np

from citadel.answer.service import QueryVectorMemo
from citadel.types import Passage, Principal


class _Proxy:
    def __init__(self, handle: Any, timeout_s: float):
        self._handle = handle
        self._timeout_s = timeout_s

    def _call(self, method: str, *args: Any, handle: Any = None) -> Any:
        target = getattr(handle or self._handle, method)
        return target.remote(*args).result(timeout_s=self._timeout_s)


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
        return np.vstack([self._call("embed_query", text) for text in texts])

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._call("embed_passages", list(texts)), dtype=np.float32)


class RemoteRetriever(_Proxy):
    """Retriever interface over the retriever deployment. Each call names the tenant as its
    multiplexed model id, so Serve routes it to a replica that has the partition loaded. The query
    vector comes back with the result and goes into the gateway's memo for the confidence gate."""

    def __init__(self, handle: Any, timeout_s: float, memo: QueryVectorMemo | None = None):
        super().__init__(handle, timeout_s)
        self._memo = memo

    def retrieve(self, principal: Principal, query: str, top_k: int | None = None, request_id: str | None = None):
        routed = self._handle.options(multiplexed_model_id=principal.tenant_id)
        result, vector = self._call("retrieve", principal, query, top_k, request_id, handle=routed)
        if vector is not None and self._memo is not None:
            self._memo.remember(query, np.asarray(vector, dtype=np.float32))
        return result


class RemoteReranker(_Proxy):
    @cached_property
    def model_id(self) -> str:
        return self._call("model_id")

    def rerank(self, question: str, passages: Sequence[Passage], top_n: int) -> list[Passage]:
        return self._call("rerank", question, list(passages), top_n)


class RemoteGenerator(_Proxy):
    @cached_property
    def model_id(self) -> str:
        return self._call("model_id")

    def generate(self, question: str, sources) -> str:
        return self._call("generate", question, list(sources))


class RemoteRouter(_Proxy):
    def route(self, question: str):
        return self._call("route", question)
