"""A run's steps (DESIGN.md §10): which may start, running them in parallel, recording each result.

A round runs the ready steps, at most `max_parallel_steps` at once, each on a worker thread with the
deadline's context. Before each start the lease is renewed and the run-wide limits are checked
(cancellation, the deadline, the budgets, the step cap, a repeated identical call); a limit that fires
starts nothing more, and the steps already started finish and are recorded. A step's failure is its
result, not the run's end. A step that must wait for a person (an approval, a review) parks the run
(citadel/agent/approval_flow.py): nothing more starts and it stays unrecorded until the decision.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from citadel.agent.approval_flow import NO_APPROVALS, ApprovalFlow
from citadel.agent.budget import RunBudget
from citadel.agent.evidence import passage_from_record, passage_record, passage_tokens
from citadel.agent.executor import StepContext, StepExecutor
from citadel.agent.journal import RunJournal, RunState
from citadel.agent.plan import SEARCH, Step
from citadel.agent.records import RecordKey, RefreshRecord, StepOutcome, StepResult, StopReason, succeeded
from citadel.chunking import count_tokens
from citadel.config import AgentConfig
from citadel.errors import CitadelError, Forbidden
from citadel.reviews.tasks import FlaggedSource
from citadel.state.runs import EventType
from citadel.tools.registry import NeedsApproval, Refused, ToolOutcome, ToolRegistry
from citadel.tracing import emit_span

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundEnd:
    """How a round ended: every admitted step recorded, a stopping rule that fired, or parked."""

    stop: StopReason | None = None
    parked: bool = False


class StepRunner:
    """`executor`: runs one step (injectable: a test counts executions or holds steps at a barrier);
    `after_step(run_id, step_id)`: called once a step's result and event are recorded (a crash point);
    `flagged(tenant, sources)`: told of the sources a step's screen dropped (their owners' review
    tasks); `config`: the step cap and `max_parallel_steps` (read at each round)."""

    def __init__(self, journal: RunJournal, tools: ToolRegistry, executor: StepExecutor, flow: ApprovalFlow,
                 budget: RunBudget, config: AgentConfig, *, after_step: Callable[[str, str], None] | None = None,
                 flagged: Callable[[str, list], None] | None = None):
        self.journal = journal
        self.tools = tools
        self.executor = executor
        self.flow = flow
        self.budget = budget
        self.config = config
        self.after_step = after_step
        self.flagged = flagged

    # ------------------------------------------------------------------ the limits
    def limits(self, state: RunState) -> StopReason | None:
        """Cancellation, the deadline and the budget: the reason to start nothing new, or None."""
        if self.journal.cancel_requested(state):
            return StopReason.CANCELLED
        if state.deadline.expired():
            return StopReason.DEADLINE
        if state.over_budget:
            return StopReason.USER_BUDGET
        exhausted = self.budget.exhausted(state.meter.spent)
        return StopReason(exhausted) if exhausted is not None else None

    def _admit(self, state: RunState, step: Step, in_flight: int, calls: set[str]) -> StopReason | None:
        """Whether `step` may start now; the stopping rule that forbids it otherwise."""
        reason = self.limits(state)
        if reason is None and state.executed() + in_flight >= self.config.step_cap:
            reason = StopReason.STEP_CAP
        if reason is None and self.tools.call_key(step) in calls:
            reason = StopReason.REPEATED_CALL
        return reason

    # ------------------------------------------------------------------ a round
    def round(self, state: RunState, owner: str, ready: list[Step]) -> RoundEnd:
        """Run the ready steps, at most `max_parallel_steps` at once, recording each result as it
        comes; a stopping rule ends the round once the steps already started have finished."""
        calls = {r.get("call", "") for _, r in state.step_records()}
        queue, running = list(ready), {}
        stop, parked = None, False
        limit = self.config.max_parallel_steps
        with concurrent.futures.ThreadPoolExecutor(limit, thread_name_prefix="agent-step") as pool:
            while queue or running:
                while queue and stop is None and not parked and len(running) < limit:
                    self.journal.renew(state, owner)  # between steps: still ours, or stop touching the run
                    stop = self._admit(state, queue[0], len(running), calls)
                    if stop is None:
                        step = queue.pop(0)
                        calls.add(self.tools.call_key(step))
                        # The deadline is a context variable: each step's thread gets a copy of it.
                        running[pool.submit(contextvars.copy_context().run, self.execute, state, step)] = step
                if not running:
                    break
                done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    parked = self._settle(state, running.pop(future), future.result()) or parked
        return RoundEnd(stop, parked)

    def _settle(self, state: RunState, step: Step, result: StepResult) -> bool:
        """A finished step: recorded, or its run parked (start nothing more; the steps in flight finish
        and are recorded). Whether it parked."""
        if result.status.parks:
            self.flow.park(state, step, result)
            return True
        self._finish(state, step, result)
        if self.after_step is not None:
            self.after_step(state.run_id, step.id)
        return False

    # ------------------------------------------------------------------ one step
    def execute(self, state: RunState, step: Step) -> StepResult:
        """One step on a worker thread (a span with the chunk ids it found); a failure is the step's
        result, not the run's end."""
        started = time.perf_counter()
        rounds, review = self.flow.latest_review(state, step.id)
        try:
            clearance = self.flow.clear(state, step, review)
            result = clearance.held or self._attempt(state, clearance.step, clearance.approved, rounds)
        except CitadelError as error:
            result = StepResult.failed(error.code)
        except Exception:
            log.exception("step %s of run %s failed", step.id, state.run_id)
            result = StepResult.failed("internal_error")
        emit_span(state.run_id, RecordKey.step(step.id), (time.perf_counter() - started) * 1000.0,
                  [p["chunk_id"] for p in result.passages], tool=step.tool, status=str(result.status))
        return result

    def _attempt(self, state: RunState, step: Step, approved: dict[str, Any] | None, rounds: int) -> StepResult:
        """The cleared step run; a call that needs a person's approval or that the policy engine
        refused becomes the request or review it needs."""
        match self.executor.execute(StepContext(state.run_id, state.principal, approved), step,
                                    self.tools.for_step(step)):
            case NeedsApproval() as needed:
                return self.flow.on_approval_required(needed)
            case Refused() as refused:
                return self.flow.on_refused(step, refused, rounds)
            case found:
                return self._ran(found)

    @staticmethod
    def _ran(found: dict[str, Any]) -> StepResult:
        """A step whose call ran: the passages it found, or what the tool's system answered."""
        result = StepResult(StepOutcome.OK, passages=[passage_record(passage_from_record(r))
                                                      for r in found.get("passages", [])],
                            degraded=[str(d) for d in found.get("degraded", [])])
        if found.get("screened"):  # what the screen kept from the model
            result.screened = found["screened"]
        if found.get("screened_response"):
            result.screened_response = found["screened_response"]
        if "result" in found:  # a tool that acts: what its system answered, and whether it is audited
            result.result, result.audit, result.repeated = (found["result"], bool(found.get("audit")),
                                                            bool(found.get("repeated")))
        return result

    def _finish(self, state: RunState, step: Step, result: StepResult) -> None:
        passages = [passage_from_record(r) for r in result.passages]
        tokens = count_tokens(step.ask) + passage_tokens(passages)
        record = self.journal.record(state, RecordKey.step(step.id), {
            **result.to_record(), "id": step.id, "tool": step.tool, "ask": step.ask,
            "call": self.tools.call_key(step), "tokens": tokens})
        state.meter.add(int(record.get("tokens", 0)))
        self._report_screened(state, step, record)
        self.journal.emit(state, EventType.PROGRESS, RecordKey.step(step.id), {
            "stage": "step", "step_id": step.id, "ask": step.ask, "tool": step.tool, "status": record["status"],
            "error": record.get("error"), "chunk_ids": [p["chunk_id"] for p in record["passages"]],
            **({"result": record["result"]} if "result" in record else {})})

    def _report_screened(self, state: RunState, step: Step, record: dict[str, Any]) -> None:
        """A step whose screen dropped something: a progress event naming the sources (never their
        text), and their owners told (once per document version, by the reporter)."""
        screened = record.get("screened") or []
        if not screened and not record.get("screened_response"):
            return
        self.journal.emit(state, EventType.PROGRESS, f"screened:{step.id}", {
            "stage": "screened", "step_id": step.id, "tool": step.tool,
            "screened": [{"document_id": s["document_id"], "version": s["version"]} for s in screened],
            "tool_response": bool(record.get("screened_response"))})
        if self.flagged is not None and screened:
            self.flagged(state.run.tenant_id, [FlaggedSource(s["document_id"], int(s["version"]), s["chunk_id"])
                                               for s in screened])

    # ------------------------------------------------------------------ searches again
    def refreshed(self, state: RunState) -> list[tuple[Step, dict[str, Any]]]:
        """After a reviewer corrected the sources of a held answer, the run's searches made again,
        once per round (recorded): the corrected documents are new versions, and the passages the
        steps recorded are of the versions the live check now drops. Empty before any correction."""
        round_ = self.flow.sources_corrected(state)
        if round_ is None:
            return []
        key = RecordKey.refresh(round_)
        searches = [(s, r) for s, r in state.step_records() if s.tool == SEARCH and succeeded(r)]
        if key not in state.records:
            found = {}
            for step, _ in searches:
                outcome = self.executor.execute(StepContext(state.run_id, state.principal), step,
                                                self.tools.for_step(step))
                found[step.id] = self._found_again(outcome)
            self.journal.record(state, key, RefreshRecord(found))
        again = state.records[key]["passages"]
        return [(s, {"status": str(StepOutcome.OK), "passages": again.get(s.id, [])}) for s, _ in searches]

    @staticmethod
    def _found_again(outcome: ToolOutcome) -> list[dict[str, Any]]:
        """A search made again: its passages. A refresh has no step to park on or to review, so a search
        the policy engine now holds for an approval or refuses (only a `search` given a spec of its own)
        ends the run, with the reason a step would have failed with."""
        match outcome:
            case NeedsApproval(spec=spec):
                raise Forbidden(f"{spec.name} needs an approval from {spec.approver_group}", code=NO_APPROVALS)
            case Refused() as refused:
                raise Forbidden(refused.detail, code=refused.reason)
        return [passage_record(passage_from_record(r)) for r in outcome.get("passages", [])]
