"""The runs endpoint family (DESIGN.md §10): conversations, messages that start runs, a run's state and
its replayable event log, cancellation, and feedback on answers.

Everything is scoped to the verified user: another user's conversation or run is 404, like a missing
one, so ids cannot be probed. A message starts a run on this process's worker pool and returns at
once (202); the run records every step before the next, so when this process dies another adopts the
run once its lease expires (`adopt_orphans`, on a timer) and continues from the last recorded step.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import Executor
from typing import Any, Callable

from citadel.catalog.base import Catalog
from citadel.config import AgentConfig
from citadel.errors import InvalidRequest, NotFound, Overloaded, PayloadTooLarge
from citadel.agent.budget import PREPAID
from citadel.agent.memory import ConversationMemory
from citadel.agent.records import record_outcome, run_outcome
from citadel.quality.candidates import CandidateQueue
from citadel.state.conversations import Conversation, ConversationStore
from citadel.state.runs import FINISHED, TERMINAL_EVENTS, EventType, Run, RunEvent, RunStatus, RunStore
from citadel.types import Principal
from serving.services.access import Caller
from serving.services.metrics import ApiMetrics

log = logging.getLogger(__name__)

FEEDBACK_VOTES = ("up", "down")
FEEDBACK_REASONS = ("wrong_source", "incomplete", "outdated", "other")
MAX_FEEDBACK_COMMENT_CHARS = 2_000
# How long one long-poll of a run's events waits before the stream sends a keep-alive.
EVENT_WAIT_S = 10.0
# Event data fields for the orchestrator's own bookkeeping (replay de-duplication), not for clients.
INTERNAL_EVENT_FIELDS = ("key",)


class RunsService:
    def __init__(self, agent: AgentConfig, runs: RunStore, memory: ConversationMemory, catalog: Catalog,
                 drive: Callable[[str, str], Run], pool: Executor, metrics: ApiMetrics, owner: str | None = None,
                 charge: Callable[[Principal, str], int] | None = None,
                 on_run_created: Callable[[str, Principal, str | None], None] | None = None,
                 candidates: CandidateQueue | None = None, max_runs: int | None = None, retry_after_s: int = 1):
        """`agent`: the message size bound; `drive(run_id, owner)` works a run to its end under its lease (the orchestrator's);
        `charge(principal, text)`: charges starting a run to the user's daily budget, like an answer
        (BudgetExhausted, a 429, when it would pass it), and returns the tokens it paid for; the
        run's records charge what they spend beyond that (citadel/agent/budget.py);
        `on_run_created(run_id, principal, user_context)`: called once a run exists and before it starts,
        so the tools' delegation is taken while the user's own context is fresh (citadel/tools/delegation.py);
        `candidates`: where a thumbs-down with a reason is queued as a candidate test item (None: nowhere);
        `max_runs`: runs this process holds started and unfinished (working, or waiting for a worker) before
        a message that would start one more is refused as Overloaded, with `retry_after_s` (None: no bound)."""
        self.candidates = candidates
        self._charge = charge
        self.on_run_created = on_run_created
        self.agent = agent
        self.metrics = metrics
        self.runs = runs
        self.memory = memory
        self.conversations: ConversationStore = memory.store
        self.catalog = catalog
        self._drive = drive
        self._pool = pool
        self.owner = owner or f"replica-{uuid.uuid4().hex[:12]}"
        self._running: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._max_runs = max_runs
        self._retry_after_s = retry_after_s

    # ------------------------------------------------------------------ conversations
    def create_conversation(self, caller: Caller) -> dict:
        principal = caller.principal
        conversation = self.conversations.create(Conversation(uuid.uuid4().hex, principal.tenant_id,
                                                              principal.user_id))
        return {"conversation_id": conversation.conversation_id}

    def delete_conversation(self, caller: Caller, conversation_id: str) -> dict:
        """The conversation and everything derived from it: messages, summary, memories taken from it."""
        self._own_conversation(caller, conversation_id)
        self.memory.forget(conversation_id, caller.principal)
        return {"conversation_id": conversation_id, "deleted": True}

    def delete_my_data(self, caller: Caller) -> dict:
        """Everything the caller stored here in this tenant: conversations (messages, summaries, the
        memories taken from them), memories, and runs with their event logs and steps; audited.
        Another user's data, and this user's in another tenant, stay. A run still working when its
        records go fails at its next write and records nothing more."""
        principal = caller.principal
        tenant_id, user_id = principal.tenant_id, principal.user_id
        memories = len(self.conversations.memories(tenant_id, user_id))
        deleted = {"conversations": self.conversations.delete_user(tenant_id, user_id), "memories": memories,
                   "runs": self.runs.delete_user(tenant_id, user_id)}
        self.catalog.audit(user_id, "user_data_deleted", tenant_id, user_id, {**deleted, "service": caller.service.id})
        return {"tenant_id": tenant_id, "user_id": user_id, "deleted": deleted}

    def post_message(self, caller: Caller, conversation_id: str, content: str) -> dict:
        """Record the user's message and start a run answering it; returns its id at once."""
        if len(content) > self.agent.max_message_chars:
            raise PayloadTooLarge(f"a message holds at most {self.agent.max_message_chars:,} characters")
        if not content.strip():
            raise InvalidRequest("the message is empty")
        self._own_conversation(caller, conversation_id)
        self._refuse_when_full()  # before anything is charged or recorded: a refused message leaves no run
        principal = caller.principal
        prepaid = self._charge(principal, content) if self._charge is not None else 0  # before anything starts
        run = self.runs.create(Run(uuid.uuid4().hex, principal.tenant_id, principal.user_id, conversation_id,
                                   content, groups=tuple(sorted(principal.groups))))
        if prepaid:
            self.runs.record_step(run.run_id, PREPAID, {"tokens_paid": prepaid})
        self.memory.record_question(conversation_id, principal, content, run.run_id)  # and any "remember that …"
        if self.on_run_created is not None:
            self.on_run_created(run.run_id, principal, caller.user_context)
        self._start(run.run_id)
        return {"run_id": run.run_id}

    # ------------------------------------------------------------------ runs
    def run(self, caller: Caller, run_id: str) -> dict:
        """Status, path, stop reason, the outcome of its answer (null before it answers) and the
        recorded steps (without their results' bodies)."""
        run = self._own_run(caller, run_id)
        steps = self.runs.steps(run_id)
        return {**_public_run(run), "outcome": run_outcome(steps),
                "steps": [{"id": step_id, "status": record.get("status", "done")} for step_id, record in steps.items()]}

    def events(self, caller: Caller, run_id: str, after_seq: int = 0) -> list[dict]:
        self._own_run(caller, run_id)
        return [_public_event(e) for e in self.runs.events(run_id, after_seq)]

    def wait_events(self, caller: Caller, run_id: str, after_seq: int, timeout_s: float = EVENT_WAIT_S) -> list[dict]:
        """Events after `after_seq`, waiting up to `timeout_s` for the next one (for the event stream)."""
        self._own_run(caller, run_id)
        return [_public_event(e) for e in self.runs.wait(run_id, after_seq, timeout_s)]

    def cancel(self, caller: Caller, run_id: str) -> dict:
        """Ask the run to stop: the orchestrator checks between steps and still answers with what it
        found (a run waiting for an approval is restarted so it can)."""
        run = self._own_run(caller, run_id)
        self.runs.request_cancel(run_id)
        if run.status == RunStatus.WAITING:
            self.resume(run_id)
        return {"run_id": run_id, "status": str(run.status), "cancel_requested": True}

    # ------------------------------------------------------------------ feedback
    def feedback(self, caller: Caller, answer_id: str, vote: str, reason: str | None, comment: str) -> dict:
        """A vote on one of the caller's own answers, stored with the sources and versions it cited."""
        if vote not in FEEDBACK_VOTES:
            raise InvalidRequest(f"vote is one of {FEEDBACK_VOTES}")
        if reason is not None and reason not in FEEDBACK_REASONS:
            raise InvalidRequest(f"reason is one of {FEEDBACK_REASONS}")
        if len(comment) > MAX_FEEDBACK_COMMENT_CHARS:
            raise PayloadTooLarge(f"a comment holds at most {MAX_FEEDBACK_COMMENT_CHARS:,} characters")
        principal = caller.principal
        entry = self.catalog.answer_entry(answer_id, principal.tenant_id, principal.user_id)
        if entry is None:
            raise NotFound(f"no answer {answer_id!r}")
        sources = [{"document_id": c["document_id"], "version": c["version"]}
                   for c in entry["response"].get("citations", [])]
        feedback_id = self.catalog.record_feedback(answer_id, principal.tenant_id, principal.user_id, vote, reason,
                                                   comment, sources)
        self.metrics.feedback_recorded(principal.tenant_id, vote, reason)
        if vote == "down" and reason is not None:
            self._queue_candidate(principal.tenant_id, answer_id, entry, reason, comment)
        return {"feedback_id": feedback_id, "answer_id": answer_id, "sources": sources}

    def _queue_candidate(self, tenant_id: str, answer_id: str, entry: dict, reason: str, comment: str) -> None:
        """A thumbs-down with a reason becomes a candidate test item (once per answer); the vote is
        stored already, so a failure here costs the candidate, never the vote."""
        if self.candidates is None:
            return
        try:
            self.candidates.add_feedback(tenant_id, answer_id, entry, reason, comment)
        except Exception:
            log.exception("feedback on answer %s not queued as a candidate item", answer_id)

    # ------------------------------------------------------------------ running
    def adopt_orphans(self, limit: int = 20) -> list[str]:
        """Start the unfinished runs whose lease expired (their process died) or was never taken."""
        limit = min(limit, self._room())
        if limit <= 0:  # full: the orphans wait for a replica with room (or for this one's next look)
            return []
        adopted = [run_id for run_id in self.runs.orphans(limit) if self._start(run_id)]
        if adopted:
            log.warning("adopted %d orphaned run(s): %s", len(adopted), adopted)
        return adopted

    def resume(self, run_id: str) -> bool:
        """A parked run back to the queue (adoptable again) and started on this process: its approval
        was decided, or it was cancelled while waiting. False when it already runs here."""
        self.runs.update(run_id, status=RunStatus.QUEUED)
        return self._start(run_id)

    def wait_for_runs(self, timeout_s: float) -> None:
        """Tests and shutdown: let the runs this process started finish."""
        with self._lock:
            futures = list(self._running.values())
        for future in futures:
            future.result(timeout_s)

    def _room(self) -> int:
        """Runs this process may still start (a large number when unbounded)."""
        if self._max_runs is None:
            return 1 << 30
        with self._lock:
            return max(0, self._max_runs - len(self._running))

    def _refuse_when_full(self) -> None:
        """Overloaded when this process already holds `max_runs` unfinished runs. Without the bound, past
        the peak the pool's queue only grows: runs wait longer than their callers do, the callers start
        new ones, and the workers spend the time on runs nobody reads any more."""
        if self._room() <= 0:
            raise Overloaded("too many runs are in progress here; retry after the delay in Retry-After",
                             retry_after_s=self._retry_after_s)

    def _start(self, run_id: str) -> bool:
        with self._lock:
            if run_id in self._running:
                return False
            self._running[run_id] = self._pool.submit(self._work, run_id)
            return True

    def _work(self, run_id: str) -> None:
        started = time.perf_counter()
        try:
            run = self._drive(run_id, self.owner)
            if run.status in FINISHED:
                steps = sum(key.startswith("step:") for key in self.runs.steps(run_id))
                self.metrics.observe_run(run.path, str(run.status), run.stop_reason, steps,
                                         time.perf_counter() - started)
        except Exception:  # the run's own log says what failed; the worker must not die loudly
            log.exception("run %s failed outside the orchestrator", run_id)
        finally:
            with self._lock:
                self._running.pop(run_id, None)

    # ------------------------------------------------------------------ scope
    def _own_conversation(self, caller: Caller, conversation_id: str) -> Conversation:
        conversation = self.conversations.get(conversation_id)
        principal = caller.principal
        if conversation is None or (conversation.tenant_id, conversation.user_id) != (principal.tenant_id,
                                                                                     principal.user_id):
            raise NotFound(f"no conversation {conversation_id!r}")
        return conversation

    def _own_run(self, caller: Caller, run_id: str) -> Run:
        run = self.runs.get(run_id)
        principal = caller.principal
        if run is None or (run.tenant_id, run.user_id) != (principal.tenant_id, principal.user_id):
            raise NotFound(f"no run {run_id!r}")
        return run


def _public_run(run: Run) -> dict:
    return {"run_id": run.run_id, "conversation_id": run.conversation_id, "status": str(run.status),
            "path": run.path, "stop_reason": run.stop_reason, "created_at": run.created_at,
            "updated_at": run.updated_at}


def _public_event(event: RunEvent) -> dict:
    data = {k: v for k, v in event.data.items() if k not in INTERNAL_EVENT_FIELDS}
    if event.type == EventType.FINAL and "outcome" not in data:  # recorded before answers carried one
        data["outcome"] = record_outcome(data)
    return {"seq": event.seq, "type": str(event.type), "data": data}


def is_terminal(event: dict) -> bool:
    return event["type"] in TERMINAL_EVENTS
