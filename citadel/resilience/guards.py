"""Stage wrappers that put a latency breaker (and a drill's fault injector) around a synchronous
stage call, keeping the stage's interface (DESIGN.md §5).

The answer pipeline runs its stages on worker threads, so these wrappers are synchronous and
thread-safe. Each wrapper decides what an open breaker means for its stage:
- embedder: raise, and the retriever falls back to keyword-only retrieval (visible as degraded);
- reranker: raise, and the answer service skips reranking (degraded);
- generator: primary, then secondary, each behind its own breaker; the answer service's extractive
  fallback catches the rest (degraded);
- catalog: raise `PermissionsUnavailable`: the request fails closed (503), never unchecked.
Faults are injected inside the timed region, so a drill's slowness trips breakers like real slowness.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

from citadel.errors import CatalogUnavailable
from citadel.resilience.breaker import BreakerOpen, LatencyBreaker
from citadel.resilience.deadline import check_deadline
from citadel.types import Degradation

MS = 1000.0


class _NoFaults:
    def before(self) -> None:
        return None


NO_FAULTS = _NoFaults()


class Guard:
    """One breaker (optional) and one fault injector (optional) around synchronous calls."""

    def __init__(self, breaker: LatencyBreaker | None = None, injector: Any = NO_FAULTS,
                 now: Callable[[], float] = time.monotonic):
        self.breaker = breaker
        self.injector = injector
        self._now = now
        self._lock = threading.Lock()  # the breaker is not thread-safe; calls are

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        check_deadline()  # a hop never starts after the request's deadline (it would be wasted work)
        breaker = self.breaker
        if breaker is not None:
            with self._lock:
                admitted = breaker.allow()
            if not admitted:
                raise BreakerOpen(breaker.name, breaker.state)
        started = self._now()
        try:
            self.injector.before()
            result = fn(*args, **kwargs)
        except Exception:
            self._record(started, ok=False)
            raise
        self._record(started, ok=True)
        return result

    def _record(self, started: float, ok: bool) -> None:
        if self.breaker is not None:
            with self._lock:
                self.breaker.record((self._now() - started) * MS, ok)


class _Guarded:
    """A stage behind a guard; the model id reads through to the stage."""

    def __init__(self, inner, guard: Guard):
        self._inner = inner
        self._guard = guard

    @property
    def model_id(self) -> str:
        return self._inner.model_id


class GuardedEmbedder(_Guarded):
    @property
    def dim(self) -> int:
        return self._inner.dim

    def embed_queries(self, texts: list[str]):
        return self._guard.call(self._inner.embed_queries, texts)

    def embed_passages(self, texts: list[str]):
        # Ingestion batches, not queries: seconds per call would trip the query path's breaker.
        return self._inner.embed_passages(texts)


class GuardedReranker(_Guarded):
    @property
    def enabled(self) -> bool:
        return self._inner.enabled

    def rerank(self, question: str, passages: Sequence, top_n: int):
        return self._guard.call(self._inner.rerank, question, passages, top_n)


class GuardedRetriever:
    """The in-process retriever with its guard in front (the drill's fault injector, fused topology)."""

    def __init__(self, inner, guard: Guard):
        self._inner = inner
        self._guard = guard

    def retrieve(self, principal, query: str, top_k: int | None = None, request_id: str | None = None):
        return self._guard.call(self._inner.retrieve, principal, query, top_k, request_id)


class ResilientGenerator:
    """Primary generator, then the secondary; `generate_with_status` says which answered."""

    def __init__(self, primary, primary_guard: Guard, secondary=None, secondary_guard: Guard | None = None):
        self._primary = primary
        self._primary_guard = primary_guard
        self._secondary = secondary
        self._secondary_guard = secondary_guard or Guard()
        self._answered = threading.local()  # the backend that answered this thread's last call

    @property
    def model_id(self) -> str:
        return self._primary.model_id

    @property
    def last_stats(self) -> dict:
        """What the backend that answered this thread's last call measured (its `last_stats`)."""
        return dict(getattr(getattr(self._answered, "backend", None), "last_stats", None) or {})

    def count_tokens(self, text: str) -> int:
        """Counted as the primary generator counts (its tokenizer decides what fits a prompt)."""
        return self._primary.count_tokens(text)

    def generate(self, question: str, sources, prompt=None) -> str:
        return self.generate_with_status(question, sources, prompt)[0]

    def generate_with_status(self, question: str, sources, prompt=None) -> tuple[str, str, list[str]]:
        """(text, model id, downgrades). Raises when both backends are out."""
        self._answered.backend = None
        try:
            text = self._primary_guard.call(self._primary.generate, question, sources, prompt)
            self._answered.backend = self._primary
            return text, self._primary.model_id, []
        except Exception:
            if self._secondary is None:
                raise
        text = self._secondary_guard.call(self._secondary.generate, question, sources, prompt)
        self._answered.backend = self._secondary
        return text, self._secondary.model_id, [Degradation.GENERATOR_SECONDARY]


# Catalog reads on the query path; anything else (ingestion, admin writes) passes through unguarded.
GUARDED_CATALOG_READS = ("readable_documents", "published_segment", "get_document", "latest_versions",
                         "current_policy")


class GuardedCatalog:
    """The catalog with its query-path reads behind a breaker; any failure there fails closed."""

    def __init__(self, inner, guard: Guard, failures: tuple[type[BaseException], ...] = (Exception,)):
        self._inner = inner
        self._guard = guard
        self._failures = failures

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if name not in GUARDED_CATALOG_READS:
            return attribute

        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return self._guard.call(attribute, *args, **kwargs)
            except self._failures as error:
                # The catalog's own failure type (a PermissionsUnavailable), whatever failed: callers
                # that catch a catalog's errors see the same one behind the guard.
                raise CatalogUnavailable(f"permission store unavailable ({name}): {error}") from error

        return guarded
