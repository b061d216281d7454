"""Durable runs (DESIGN.md §10): a run is an append-only, numbered event log plus a lease.

The client starts a run and watches its events separately; reconnecting with `after_seq` replays
every later event once. Each step's result is recorded (first write wins) before the next step
starts, so whoever takes over an expired lease rebuilds the run from its log and continues from the
last recorded step without running a finished one again.

A run idle for `agent.retention_days` is purged with its log (citadel/catalog/retention.py), and a
user can delete all of theirs at once (`DELETE /v1/me/data`).

Backends implement `RunStore` and pass one conformance suite: in process (`MemoryRunStore`, tests
and one-process use), SQLite (the embedded default, shared by the processes of one machine) and Redis
Streams (when Redis is configured); `make_run_store` (citadel/state/factory.py) chooses. The bounds every
backend applies (record size, wait, lease, orphans) are defined here, once. Time comes from an
injected clock. Failures raise StateUnavailable.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any, Callable, Protocol, runtime_checkable

Clock = Callable[[], float]

# The most events one `events` call returns; a client pages with `after_seq`.
MAX_EVENTS_PER_READ = 1_000
# The longest one `wait` blocks, whatever the caller asks (an SSE handler re-waits in a loop).
MAX_WAIT_S = 60.0
# The most runs one `orphans` call returns.
MAX_ORPHANS = 1_000
# The largest event data or step result, as JSON characters: a run's log is not a blob store.
MAX_RECORD_CHARS = 1_000_000
# The longest lease one call may take: a replica renews well before it runs out.
MAX_LEASE_S = 86_400.0


class EventType(StrEnum):
    PROGRESS = "progress"
    TOKEN = "token"
    CITATION = "citation"
    APPROVAL_REQUIRED = "approval_required"
    REVIEW_PENDING = "review_pending"
    FINAL = "final"  # the validated answer: authoritative, whatever tokens came before
    ERROR = "error"


TERMINAL_EVENTS = frozenset({EventType.FINAL, EventType.ERROR})


class RunStatus(StrEnum):
    QUEUED = "queued"  # created; no replica has taken its lease yet
    RUNNING = "running"
    SUCCEEDED = "succeeded"  # answered in full
    STOPPED = "stopped"  # a stopping rule ended it; it answered with what it found
    FAILED = "failed"
    CANCELLED = "cancelled"
    WAITING = "waiting"  # parked on a person's approval: no lease, nothing in memory, not adopted


FINISHED = frozenset({RunStatus.SUCCEEDED, RunStatus.STOPPED, RunStatus.FAILED, RunStatus.CANCELLED})
# Runs no replica adopts: the finished ones and those waiting for an approval (a decision restarts them).
NOT_ADOPTABLE = FINISHED | {RunStatus.WAITING}


@dataclass(frozen=True)
class RunEvent:
    run_id: str
    seq: int  # 1, 2, 3 … per run, no gaps
    type: EventType
    data: dict[str, Any]
    at: float

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "type": str(self.type), "data": self.data}


@dataclass(frozen=True)
class Run:
    run_id: str
    tenant_id: str
    user_id: str
    conversation_id: str
    question: str
    # The groups verified when the run started: a run resumed elsewhere acts with them, and every
    # passage is still re-checked live against the catalog before it leaves.
    groups: tuple[str, ...] = ()
    status: RunStatus = RunStatus.QUEUED
    path: str | None = None  # "single_shot" or "agentic", once routed
    stop_reason: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "groups": list(self.groups), "status": str(self.status)}


@runtime_checkable
class RunStore(Protocol):
    def create(self, run: Run) -> Run:
        """Store a new run (its times from the store's clock); a second create of the id is an error."""

    def get(self, run_id: str) -> Run | None: ...

    def update(self, run_id: str, *, status: RunStatus | None = None, path: str | None = None,
               stop_reason: str | None = None) -> Run:
        """Set the given fields (None leaves one as it is); KeyError for an unknown run."""

    def append(self, run_id: str, type: EventType, data: dict[str, Any]) -> RunEvent:
        """Add the run's next event: seq is one more than the last, atomically across processes."""

    def events(self, run_id: str, after_seq: int = 0, limit: int = MAX_EVENTS_PER_READ) -> list[RunEvent]:
        """Events with seq > after_seq, in order, at most `limit`."""

    def wait(self, run_id: str, after_seq: int, timeout_s: float) -> list[RunEvent]:
        """Like `events`, but waits up to `timeout_s` for one to arrive when there is none yet."""

    def record_step(self, run_id: str, step_id: str, result: dict[str, Any]) -> dict[str, Any]:
        """Record a finished step's result. The first record wins; a later one for the same step
        returns the stored result unchanged (a resumed run never overwrites what happened)."""

    def steps(self, run_id: str) -> dict[str, dict[str, Any]]:
        """Every recorded step's result, by step id."""

    def acquire(self, run_id: str, owner: str, ttl_s: float) -> bool:
        """Take the run's lease for `ttl_s` if it is free, expired or already `owner`'s."""

    def renew(self, run_id: str, owner: str, ttl_s: float) -> bool:
        """Extend `owner`'s lease; False when another owner holds it now (stop working on the run)."""

    def release(self, run_id: str, owner: str) -> None:
        """Give the lease up (only `owner`'s; a parked run holds none)."""

    def orphans(self, limit: int = 100) -> list[str]:
        """Unfinished runs whose lease has expired or was never taken: work for a replica to adopt."""

    def request_cancel(self, run_id: str) -> None: ...

    def cancel_requested(self, run_id: str) -> bool: ...

    def delete_user(self, tenant_id: str, user_id: str) -> int:
        """Delete every run of this user in this tenant with its events, steps, lease and cancel flag;
        returns how many runs went."""

    def purge_idle(self, max_idle_s: float) -> int:
        """Delete the runs with no status change and no event for `max_idle_s` by the store's clock,
        with everything recorded for them; returns how many."""

    def close(self) -> None:
        """Release the backend's connections (a no-op in process)."""


class MemoryRunStore:
    """In-process runs: one lock, the clock injected. For tests and the one-process default."""

    def __init__(self, clock: Clock):
        self._now = clock
        self._lock = threading.Condition()
        self._runs: dict[str, Run] = {}
        self._events: dict[str, list[RunEvent]] = {}
        self._steps: dict[str, dict[str, dict[str, Any]]] = {}
        self._leases: dict[str, tuple[str, float]] = {}
        self._cancelled: set[str] = set()

    def create(self, run: Run) -> Run:
        with self._lock:
            if run.run_id in self._runs:
                raise ValueError(f"run {run.run_id!r} exists")
            now = self._now()
            stored = replace(run, created_at=now, updated_at=now)
            self._runs[run.run_id] = stored
            self._events[run.run_id] = []
            self._steps[run.run_id] = {}
            return stored

    def get(self, run_id: str) -> Run | None:
        with self._lock:
            return self._runs.get(run_id)

    def update(self, run_id: str, *, status: RunStatus | None = None, path: str | None = None,
               stop_reason: str | None = None) -> Run:
        with self._lock:
            run = self._runs[run_id]
            changes = {k: v for k, v in (("status", status), ("path", path), ("stop_reason", stop_reason))
                       if v is not None}
            self._runs[run_id] = replace(run, **changes, updated_at=self._now())
            return self._runs[run_id]

    def append(self, run_id: str, type: EventType, data: dict[str, Any]) -> RunEvent:
        with self._lock:
            log = self._events[run_id]
            event = RunEvent(run_id, len(log) + 1, EventType(type), dict(data), self._now())
            log.append(event)
            self._lock.notify_all()
            return event

    def events(self, run_id: str, after_seq: int = 0, limit: int = MAX_EVENTS_PER_READ) -> list[RunEvent]:
        with self._lock:
            return list(self._events.get(run_id, [])[max(0, after_seq):max(0, after_seq) + limit])

    def wait(self, run_id: str, after_seq: int, timeout_s: float) -> list[RunEvent]:
        with self._lock:
            self._lock.wait_for(lambda: len(self._events.get(run_id, [])) > after_seq, timeout=max(0.0, timeout_s))
            return self.events(run_id, after_seq)

    def record_step(self, run_id: str, step_id: str, result: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            return dict(self._steps[run_id].setdefault(step_id, dict(result)))

    def steps(self, run_id: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {k: dict(v) for k, v in self._steps.get(run_id, {}).items()}

    def acquire(self, run_id: str, owner: str, ttl_s: float) -> bool:
        with self._lock:
            holder = self._leases.get(run_id)
            if holder is not None and holder[0] != owner and holder[1] > self._now():
                return False
            self._leases[run_id] = (owner, self._now() + ttl_s)
            return True

    def renew(self, run_id: str, owner: str, ttl_s: float) -> bool:
        with self._lock:
            holder = self._leases.get(run_id)
            if holder is None or holder[0] != owner:
                return False
            self._leases[run_id] = (owner, self._now() + ttl_s)
            return True

    def release(self, run_id: str, owner: str) -> None:
        with self._lock:
            if self._leases.get(run_id, ("", 0.0))[0] == owner:
                del self._leases[run_id]

    def orphans(self, limit: int = 100) -> list[str]:
        with self._lock:
            now = self._now()
            return [run_id for run_id, run in self._runs.items()
                    if run.status not in NOT_ADOPTABLE and self._leases.get(run_id, ("", 0.0))[1] <= now][:limit]

    def request_cancel(self, run_id: str) -> None:
        with self._lock:
            self._cancelled.add(run_id)

    def cancel_requested(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._cancelled

    def delete_user(self, tenant_id: str, user_id: str) -> int:
        with self._lock:
            owned = [run_id for run_id, run in self._runs.items() if (run.tenant_id, run.user_id) == (tenant_id, user_id)]
            for run_id in owned:
                self._delete(run_id)
            return len(owned)

    def purge_idle(self, max_idle_s: float) -> int:
        with self._lock:
            cutoff = self._now() - max_idle_s
            idle = [run_id for run_id, run in self._runs.items()
                    if max([run.updated_at, *(e.at for e in self._events.get(run_id, []))]) < cutoff]
            for run_id in idle:
                self._delete(run_id)
            return len(idle)

    def _delete(self, run_id: str) -> None:
        for records in (self._runs, self._events, self._steps, self._leases):
            records.pop(run_id, None)
        self._cancelled.discard(run_id)

    def close(self) -> None:
        return None


def encode_record(value: dict[str, Any]) -> str:
    """JSON text of an event's data or a step's result; TypeError/ValueError when it cannot be stored."""
    if not isinstance(value, dict):
        raise TypeError(f"run records must be dicts, got {type(value).__name__}")
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    if len(text) > MAX_RECORD_CHARS:
        raise ValueError(f"run record of {len(text)} characters exceeds {MAX_RECORD_CHARS}")
    return text


def bounded_limit(limit: int, most: int) -> int:
    return max(0, min(int(limit), most))


def bounded_wait(timeout_s: float) -> float:
    return max(0.0, min(float(timeout_s), MAX_WAIT_S))


def lease_ttl(ttl_s: float) -> float:
    """A lease length the stores can compare: finite, 0 (expires at once) to MAX_LEASE_S."""
    ttl = float(ttl_s)
    if not 0.0 <= ttl <= MAX_LEASE_S:  # also refuses NaN
        raise ValueError(f"lease ttl must be between 0 and {MAX_LEASE_S} s, got {ttl_s!r}")
    return ttl
