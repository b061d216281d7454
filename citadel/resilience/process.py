"""Resilience of one serving process (DESIGN.md §5): its breakers, its fault injectors (drills
only) and the event loop the hedged and retried retriever reads run on.

What fails how (the wrappers are in citadel/resilience/guards.py):
- catalog / permission checks: fail closed (503 `permissions_unavailable`);
- embedder: keyword-only retrieval, `degraded`; reranker: skipped, `degraded`;
- generator: primary, secondary, then extractive, `degraded`; answer cache: fail open, `degraded`;
- retriever replicas: hedged after the observed p95, within a hedge budget; retried (the only retry
  layer) within a retry budget.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable

from citadel.config import CitadelConfig, ResilienceConfig
from citadel.resilience.faults import NO_FAULTS, FaultInjector, FaultStore
from citadel.resilience import MonotonicClock, make_breakers
from citadel.resilience.breaker import BreakerState, LatencyBreaker
from citadel.resilience.guards import Guard

log = logging.getLogger(__name__)



Transition = Callable[[str, BreakerState, BreakerState, str], None]


def fault_store(config: CitadelConfig) -> FaultStore:
    return FaultStore(config.home / "faults")


def process_resilience(config: CitadelConfig, rank_fn: Callable[[], int] = lambda: 0,
                       on_transition: Transition | None = None) -> "Resilience":
    """A serving process's Resilience from the config root: the `resilience` section, and the fault
    store under the home when drills may inject faults (`serving.fault_injection`)."""
    faults = fault_store(config) if config.serving.fault_injection else None
    return Resilience(config.resilience, faults, rank_fn, on_transition)


class Resilience:
    """Breakers and fault injectors of one process, and a background event loop for async wrappers.
    `faults`: where drills' faults are read (None: injection off, every injector a no-op)."""

    def __init__(self, settings: ResilienceConfig, faults: FaultStore | None = None,
                 rank_fn: Callable[[], int] = lambda: 0, on_transition: Transition | None = None):
        self.settings = settings
        self._rank_fn = rank_fn
        self._listeners = [on_transition] if on_transition is not None else []
        self.breakers: dict[str, LatencyBreaker] = make_breakers(settings, MonotonicClock(), self._transition)
        self._store = faults
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()

    def add_listener(self, on_transition: Transition) -> None:
        self._listeners.append(on_transition)

    def _transition(self, name: str, old: BreakerState, new: BreakerState, reason: str) -> None:
        log.warning("breaker %s: %s -> %s (%s)", name, old.value, new.value, reason)
        for listener in self._listeners:
            listener(name, old, new, reason)

    def injector(self, stage: str):
        """The stage's fault injector: a no-op unless fault injection is enabled in config."""
        if self._store is None:
            return NO_FAULTS
        return FaultInjector(self._store, stage, rank_fn=self._rank_fn)

    def guard(self, stage: str, breaker: str | None = None, inject: bool = True) -> Guard:
        """A guard with the named breaker (default: the stage's own, if configured) and, when the
        stage runs in this process, its fault injector."""
        name = breaker or stage
        return Guard(self.breakers.get(name), self.injector(stage) if inject else NO_FAULTS)

    def faults_only(self, stage: str) -> Guard:
        """The stage's fault injector without a breaker (the stage's replica side of a hop)."""
        return Guard(None, self.injector(stage))

    def run(self, coroutine, timeout_s: float) -> Any:
        """Run a coroutine on this process's resilience loop from a worker thread and wait for it."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._ensure_loop())
        try:
            return future.result(timeout_s)
        except BaseException:
            future.cancel()
            raise

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="resilience-loop", daemon=True).start()
                self._loop = loop
            return self._loop

