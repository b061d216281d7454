"""A run's journal (DESIGN.md §10): its records, its events and its lease, over the run store.

Every decision is recorded before it is acted on (first write wins: a driver that takes over an
expired lease reads the stored record and walks the same path). Every event carries a `key`; the keys
already in the log are read when a drive starts, and an event whose key is there is not appended
again, so a client's stream shows each event once. A driver whose lease renewal fails writes nothing
more (`LeaseLost`). Records arrive typed (citadel/agent/records.py) and are stored in their JSON
form, which is what `RunState.records` holds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from citadel.agent.budget import PREPAID, TokenMeter, UserSpend
from citadel.agent.memory import ConversationContext
from citadel.agent.plan import Plan, Step
from citadel.agent.records import RecordKey, Record, StopRecord
from citadel.errors import CitadelError
from citadel.resilience.clock import Clock
from citadel.resilience.deadline import Deadline
from citadel.state.runs import EventType, Run, RunStatus, RunStore
from citadel.types import Principal

log = logging.getLogger(__name__)

# Events read per page when loading the keys already in the log.
EVENT_PAGE = 1_000


class LeaseLost(Exception):
    """Another owner holds the run now: stop touching it, write nothing more."""


@dataclass
class RunState:
    """One drive's view of a run, rebuilt from its records and events."""

    run: Run
    principal: Principal
    deadline: Deadline
    records: dict[str, dict[str, Any]]  # as stored (their JSON form), by key
    emitted: set[str]
    meter: TokenMeter
    graph: dict[str, Step] = field(default_factory=dict)  # every step planned, in order
    abandoned: set[str] = field(default_factory=set)  # pending steps a re-plan replaced
    plans: list[Plan] = field(default_factory=list)
    reflections: int = 0
    evidence_counts: list[int] = field(default_factory=lambda: [0])
    no_new_rounds: int = 0
    context: ConversationContext | None = None  # the conversation so far, live-checked once per drive
    credit: int = 0  # tokens the up-front charge paid for and no record has spent yet
    over_budget: bool = False  # a charge to the user's daily budget was refused

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def stop_reason(self) -> str | None:
        """The recorded stop's reason; None while no rule stopped the run."""
        record = self.records.get(RecordKey.STOP)
        return record["reason"] if record is not None else None

    def finished(self, step_id: str) -> bool:
        return RecordKey.step(step_id) in self.records

    def step_records(self) -> list[tuple[Step, dict[str, Any]]]:
        return [(s, self.records[RecordKey.step(s.id)]) for s in self.graph.values() if self.finished(s.id)]

    def pending(self) -> list[Step]:
        return [s for s in self.graph.values() if not self.finished(s.id) and s.id not in self.abandoned]

    def ready(self) -> list[Step]:
        return [s for s in self.pending() if all(self.finished(n) for n in s.needs)]

    def executed(self) -> int:
        return sum(1 for key in self.records if key.startswith(RecordKey.STEP_PREFIX))


class RunJournal:
    """Records, events and the lease of the runs in one run store. `spend` charges each record's
    measured tokens, beyond what starting the run paid up front, to the user's daily budget (None:
    runs charge only their own budget); `bundle_id`: the config bundle kept with each answer."""

    def __init__(self, store: RunStore, clock: Clock, *, lease_ttl_s: float, deadline_s: float,
                 spend: UserSpend | None = None, bundle_id: str | None = None):
        self.store = store
        self.clock = clock
        self.lease_ttl_s = lease_ttl_s
        self.deadline_s = deadline_s
        self.spend = spend
        self.bundle_id = bundle_id

    # ------------------------------------------------------------------ the lease
    def acquire(self, run: Run, owner: str) -> bool:
        return self.store.acquire(run.run_id, owner, self.lease_ttl_s)

    def renew(self, state: RunState, owner: str) -> None:
        if not self.store.renew(state.run_id, owner, self.lease_ttl_s):
            raise LeaseLost(state.run_id)

    def release(self, run_id: str, owner: str) -> None:
        self.store.release(run_id, owner)

    # ------------------------------------------------------------------ the run
    def get(self, run_id: str) -> Run | None:
        return self.store.get(run_id)

    def update(self, state: RunState, **fields: Any) -> None:
        self.store.update(state.run_id, **fields)

    def cancel_requested(self, state: RunState) -> bool:
        return self.store.cancel_requested(state.run_id)

    def load(self, run: Run) -> RunState:
        """The run's state as its records and events left it; the deadline counts from now."""
        records = self.store.steps(run.run_id)
        principal = Principal(run.tenant_id, run.user_id, frozenset(run.groups))
        meter = TokenMeter(sum(int(r.get("tokens", 0)) for r in records.values()))
        deadline = Deadline.after(self.deadline_s, self.clock)
        prepaid = int(records.get(PREPAID, {}).get("tokens_paid", 0))
        return RunState(run, principal, deadline, records, self._emitted_keys(run.run_id), meter,
                        credit=max(0, prepaid - meter.spent),
                        over_budget=any(r.get("over_budget") for r in records.values()))

    def _emitted_keys(self, run_id: str) -> set[str]:
        keys, after = set(), 0
        while True:
            page = self.store.events(run_id, after, EVENT_PAGE)
            keys.update(str(e.data.get("key")) for e in page if e.data.get("key") is not None)
            if len(page) < EVENT_PAGE:
                return keys
            after = page[-1].seq

    # ------------------------------------------------------------------ records
    def record(self, state: RunState, key: str, record: Record | dict[str, Any]) -> dict[str, Any]:
        """Record a decision or result in its JSON form; the first record wins (a resumed run reads the
        stored one). A record that spent tokens charges them to the user's budget first (once: a
        replayed record is already stored)."""
        result = record.to_record() if isinstance(record, Record) else dict(record)
        if "tokens" in result and key not in state.records:
            result = {**result, **self._charge(state, int(result["tokens"]))}
        if key == RecordKey.ANSWER and self.bundle_id is not None:  # the bundle that made it, kept with it
            result = {**result, "bundle_id": self.bundle_id}
        stored = self.store.record_step(state.run_id, key, result)
        state.records[key] = stored
        return stored

    def _charge(self, state: RunState, tokens: int) -> dict[str, Any]:
        """Charge `tokens` to the user's daily budget, the up-front payment spent first; what to record."""
        credit = min(state.credit, max(0, tokens))
        state.credit -= credit
        due = max(0, tokens) - credit
        if self.spend is None or due == 0:
            return {}
        if self.spend.charge(state.principal, due):
            return {"charged_tokens": due}
        state.over_budget = True  # nothing more starts; the run answers with what it has
        return {"over_budget": True}

    def stop(self, state: RunState, reason: str) -> str:
        """Record that a stopping rule fired (the first stop wins) and say so; the recorded reason."""
        record = self.record(state, RecordKey.STOP, StopRecord(str(reason)))
        self.emit(state, EventType.PROGRESS, RecordKey.STOP, {"stage": "stopped", "reason": record["reason"]})
        return record["reason"]

    # ------------------------------------------------------------------ events
    def emit(self, state: RunState, type: EventType, key: str, data: dict[str, Any]) -> None:
        """Append an event once: one whose key is already in the log is not appended again."""
        if key in state.emitted:
            return
        self.store.append(state.run_id, type, {"key": key, **data})
        state.emitted.add(key)

    def fail(self, state: RunState, error: Exception) -> None:
        """An error outside any step: the run fails with an error event (a CitadelError's own code and
        message; anything else is `internal_error`, its details in the server log)."""
        if isinstance(error, CitadelError):
            code, message = error.code, error.message
        else:
            log.exception("run %s failed", state.run_id, exc_info=error)
            code, message = "internal_error", "the run failed"
        self.emit(state, EventType.ERROR, "error", {"code": code, "message": message})
        self.update(state, status=RunStatus.FAILED, stop_reason=code)
