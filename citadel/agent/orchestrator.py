"""The run loop, owned by code (DESIGN.md §10): `Orchestrator.drive(run_id, owner)`.

Code decides which step runs next, how many run at once, which tool each step may use, and when to
stop; a planner (citadel/agent/planner.py) only proposes the plan and the reflection checklist.

drive: take the run's lease → route → single-shot (`AnswerService.ask`, one answer) or agentic:
plan (a plan that cannot be made is recorded, and the run falls back to the single-shot path) →
rounds: the steps whose needs are done run in parallel, each result recorded before the next round
→ reflection, acted on by code → synthesis from the numbered evidence → token and citation events,
then `final` (authoritative: the validated answer, its citations, the conflicts, the stop reason and
what is missing). Five stopping rules, checked between steps: the step cap, the run's token/cost
budget, the deadline, no new evidence in `no_new_evidence_rounds` rounds, and a repeated identical
call. Cancellation is checked at the same points. A stopped run still answers with what it found and
names what is missing. A step or an answer that waits for a person parks the run (status WAITING);
the decision restarts it.

The Orchestrator only drives; each part is a class of its own with its collaborators injected
(`build_orchestrator` composes them):
- the journal (journal.py): records (first write wins), keyed events (each once), the lease;
- planning (planning.py): plans and reflections, and what code does with them;
- the step runner (steps.py): the limits, rounds of parallel steps, one step's execution;
- the approval flow (approval_flow.py): approvals and review tasks for steps and answers;
- synthesis (synthesis.py) and delivery (delivery.py): the answer, recorded, then its events.
Outcomes are typed (records.py): `StepOutcome`, `LoopSignal`, `StopReason`.

Resume: every decision is recorded before it is acted on, so a driver that takes over an expired
lease walks the same path, runs only what was never recorded, and never runs a finished step again.
The lease is renewed before each round and each step; a driver whose renewal fails (another owner
took the expired lease) writes nothing more. The deadline counts from each drive's start.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from citadel.agent.approval_flow import ApprovalFlow
from citadel.agent.budget import RunBudget, UserSpend
from citadel.agent.delivery import Delivery, token_pieces
from citadel.agent.evidence import RunEvidence, passage_tokens
from citadel.agent.executor import StepExecutor, ToolStepExecutor
from citadel.agent.journal import LeaseLost, RunJournal, RunState
from citadel.agent.memory import ConversationMemory, RunConversation
from citadel.agent.planner import Planner
from citadel.agent.planning import MAX_REPLANS, RunPlanning
from citadel.agent.records import (AnswerRecord, LoopSignal, RecordKey, RouteRecord, StopReason, record_outcome,
                                   run_outcome)
from citadel.agent.routing import AGENTIC, SINGLE_SHOT, run_path
from citadel.agent.steps import RoundEnd, StepRunner
from citadel.agent.synthesis import PartChecker, Synthesis, closed_record
from citadel.answer.links import LinkPolicy
from citadel.chunking import count_tokens
from citadel.config import AgentConfig
from citadel.errors import NotFound
from citadel.resilience.clock import Clock, MonotonicClock
from citadel.resilience.deadline import deadline_scope
from citadel.reviews.tasks import CLOSED, HOLD, ReviewPolicy
from citadel.state.runs import FINISHED, EventType, Run, RunStatus, RunStore
from citadel.tools.approvals import ApprovalStore
from citadel.tools.honeypots import HoneypotPlanter
from citadel.tools.registry import ToolRegistry

__all__ = ["Orchestrator", "RunDriver", "build_orchestrator", "record_outcome", "run_outcome", "token_pieces"]


@runtime_checkable
class RunDriver(Protocol):
    """What starts a run's loop: the Orchestrator here, or a proxy to the orchestrator deployment."""

    def drive(self, run_id: str, owner: str) -> Run:
        """Work the run to its end (or its parking) under `owner`'s lease; the run as it then stands."""


class Orchestrator:
    """Drives a run through its parts. `answers`: the single-shot path's answer service; `router`:
    which path a run takes; `config`: the agent's section (the parts read it through here)."""

    def __init__(self, journal: RunJournal, planning: RunPlanning, steps: StepRunner, flow: ApprovalFlow,
                 synthesis: Synthesis, delivery: Delivery, answers, router, config: AgentConfig):
        self.journal = journal
        self.planning = planning
        self.steps = steps
        self.flow = flow
        self.synthesis = synthesis
        self.delivery = delivery
        self.answers = answers
        self.router = router
        self._config = config

    @property
    def store(self) -> RunStore:
        return self.journal.store

    @property
    def planner(self) -> Planner:
        return self.planning.planner

    @planner.setter
    def planner(self, planner: Planner) -> None:
        self.planning.planner = planner

    @property
    def config(self) -> AgentConfig:
        return self._config

    @config.setter
    def config(self, config: AgentConfig) -> None:
        """A new agent section for every part that reads one (a benchmark changes the parallelism)."""
        self._config = self.planning.config = self.steps.config = config
        self.journal.lease_ttl_s, self.journal.deadline_s = config.lease_ttl_s, config.deadline_s

    # ------------------------------------------------------------------ the drive
    def drive(self, run_id: str, owner: str) -> Run:
        """Work on the run while holding its lease; returns the run as it stands afterwards. A run
        another owner holds is left alone; a finished one is returned as it is."""
        run = self.journal.get(run_id)
        if run is None:
            raise NotFound(f"no run {run_id!r}")
        if run.status in FINISHED or not self.journal.acquire(run, owner):
            return run
        state = self.journal.load(run)
        try:
            self._drive(state, owner)
        except LeaseLost:
            return self.journal.get(run_id) or run
        except Exception as error:  # outside any step (a step's failure is recorded and the run goes on)
            self.journal.fail(state, error)
        self.journal.release(run_id, owner)
        return self.journal.get(run_id) or run

    def _drive(self, state: RunState, owner: str) -> None:
        self.journal.update(state, status=RunStatus.RUNNING)
        self._emit(state, EventType.PROGRESS, "started", {"stage": "started"})
        with deadline_scope(state.deadline):
            if self._route(state) == SINGLE_SHOT:
                self._renew(state, owner)
                self._park_if(state, self._single_shot(state))
                return
            if self.planning.plan(state, 0) is None:
                self._park_if(state, self._fall_back(state))
                return
            signal = self._agentic(state, owner)
        if self._park_if(state, signal):  # waiting for a person: nothing held; a decision restarts the run
            return
        self._renew(state, owner)
        self._synthesize(state)

    def _park_if(self, state: RunState, signal: LoopSignal) -> bool:
        """A parked run waits (status WAITING) for a person's decision; whether it parked."""
        if signal is not LoopSignal.PARKED:
            return False
        self.journal.update(state, status=RunStatus.WAITING)
        return True

    def _renew(self, state: RunState, owner: str) -> None:
        self.journal.renew(state, owner)

    def _emit(self, state: RunState, type: EventType, key: str, data: dict[str, Any]) -> None:
        self.journal.emit(state, type, key, data)

    def _deliver(self, state: RunState, record: dict[str, Any], stop: str | None, path: str) -> None:
        """The recorded answer's events, then the run's status (delivery.py)."""
        self.delivery.deliver(state, record, stop, path)

    # ------------------------------------------------------------------ route and the single-shot path
    def _route(self, state: RunState) -> str:
        """Single-shot for simple questions (and refusals, which the answer service words); agentic
        for multi-part ones and for any request for an action, the router's or a tool's intent
        (citadel/agent/routing.py): only a run can call the tool and park it for approval."""
        record = state.records.get(RecordKey.ROUTE)
        if record is None:
            path = run_path(self.router.route(state.run.question), lambda: self.planning.requested_actions(state))
            record = self.journal.record(state, RecordKey.ROUTE, RouteRecord(path))
        self.journal.update(state, path=record["path"])
        self._emit(state, EventType.PROGRESS, "route", {"stage": "route", "path": record["path"]})
        return record["path"]

    def _single_shot(self, state: RunState) -> LoopSignal:
        """The answer service's answer, checked, recorded and delivered; PARKED when a failed check
        holds it for a review (asked again, fresh, once the task is decided)."""
        if self.journal.cancel_requested(state) and RecordKey.ANSWER not in state.records:
            record = self.journal.record(state, RecordKey.ANSWER, AnswerRecord.cancelled([]))
            self._deliver(state, record, StopReason.CANCELLED, SINGLE_SHOT)
            return LoopSignal.FINISH
        record = state.records.get(RecordKey.ANSWER) or self._single_shot_answer(state)
        if record is None:
            return LoopSignal.PARKED
        self._deliver(state, record, None, SINGLE_SHOT)
        return LoopSignal.FINISH

    def _single_shot_answer(self, state: RunState) -> dict[str, Any] | None:
        """The answer service's answer through the answer's checks, recorded; None when held."""
        response = self.answers.ask(state.principal, state.run.question, request_id=state.run_id)
        missing = list(response.gate.missing_terms) if (response.refused and response.gate) else []
        answer = AnswerRecord.of(response, missing, passage_tokens(response.passages) + count_tokens(response.answer))
        verdict = self.flow.single_shot_verdict(state, response)
        if verdict.action == HOLD:
            self.flow.review_pending(state, verdict.task)
            return None
        if verdict.action == CLOSED:
            answer = closed_record(answer, verdict)
        return self.journal.record(state, RecordKey.ANSWER, answer)

    def _fall_back(self, state: RunState) -> LoopSignal:
        """The plan could not be made: the single-shot path answers, and the run says why."""
        reason = state.records[RecordKey.plan(0)].get("invalid", "")
        self._emit(state, EventType.PROGRESS, "fallback", {"stage": "fallback", "to": SINGLE_SHOT, "reason": reason})
        self.journal.update(state, path=SINGLE_SHOT)
        return self._single_shot(state)

    # ------------------------------------------------------------------ the loop
    def _agentic(self, state: RunState, owner: str) -> LoopSignal:
        """The reflections already recorded replayed, then rounds until the checklist is met
        (FINISH), a stopping rule fires (STOPPED, recorded) or a person must decide (PARKED)."""
        signal = self.planning.replay(state)
        if state.stop_reason is not None:
            return LoopSignal.STOPPED
        return signal if signal is LoopSignal.FINISH else self._loop(state, owner)

    def _loop(self, state: RunState, owner: str) -> LoopSignal:
        for _ in range(self.config.step_cap + MAX_REPLANS + 2):  # each round runs a step or re-plans
            signal = self._round(state, owner)
            if signal is LoopSignal.GO_ON:
                signal = self.planning.reflect_and_settle(state)
            if signal is not LoopSignal.GO_ON:
                return signal
        self.journal.stop(state, StopReason.STEP_CAP)
        return LoopSignal.STOPPED

    def _round(self, state: RunState, owner: str) -> LoopSignal:
        """Before a round: the lease is still ours, then the run-wide limits; then the ready steps."""
        self._renew(state, owner)
        end = RoundEnd(self.steps.limits(state))
        ready = state.ready() if end.stop is None else []
        if ready:
            end = self.steps.round(state, owner, ready)
        if end.parked:
            return LoopSignal.PARKED
        if end.stop is not None:
            self.journal.stop(state, end.stop)
            return LoopSignal.STOPPED
        return LoopSignal.GO_ON

    def _synthesize(self, state: RunState) -> None:
        """The answer, recorded and delivered; the run parks when a failed check holds it for a review."""
        stop = state.stop_reason
        record = self.synthesis.answer(state, cancelled=stop == StopReason.CANCELLED)
        if record is None:
            self._park_if(state, LoopSignal.PARKED)
            return
        self._deliver(state, record, stop, AGENTIC)


def build_orchestrator(store: RunStore, answer_service, planner: Planner, tools: ToolRegistry, config: AgentConfig,
                       *, router, catalog, partitions, cost_per_1k_tokens: float = 0.0, clock: Clock | None = None,
                       executor: StepExecutor | None = None, after_step: Callable[[str, str], None] | None = None,
                       today: Callable[[], str] | None = None, memory: ConversationMemory | None = None,
                       approvals: ApprovalStore | None = None, wall_clock: Callable[[], float] = time.time,
                       honeypots: HoneypotPlanter | None = None, reviews: ReviewPolicy | None = None,
                       links: LinkPolicy | None = None, flagged: Callable[[str, list], None] | None = None,
                       spend: UserSpend | None = None, bundle_id: str | None = None) -> Orchestrator:
    """An orchestrator and its parts. `router`, `catalog`, `partitions`: the single-shot path's own;
    `executor`: runs one step (injectable: a test counts executions or holds steps at a barrier);
    `after_step(run_id, step_id)`: called once a step's result and event are recorded (a test kills
    the driver there); `today`: the ISO date deciding which effective dates are in force;
    `memory`: the run's conversation (its live-checked context goes into the synthesis prompt,
    and the answer is recorded there as the assistant's turn, by whichever driver delivers it);
    `approvals`: where a T2 call's approval waits (without one, such a call fails the step);
    `wall_clock`: the time approvals escalate and expire by (shared across processes);
    `honeypots`: plants a deliberately wrong approval request now and then, to measure reviews;
    `reviews`: who reviews a failed check and for how long its task waits (citadel/reviews/tasks.py;
    checks go to a person only with `approvals`, the store their tasks wait in); `links`: what the
    final answer may link to (citadel/answer/links.py; by default no link, image or HTML leaves);
    `flagged(tenant, sources)`: told of the sources a step's screen dropped; `spend`: charges each
    record's measured tokens, beyond what starting the run paid up front, to the user's daily budget
    (a refused charge stops the run by USER_BUDGET; None: runs charge only their own budget);
    `bundle_id`: the config bundle (citadel/quality/bundle.py) recorded with the run's answer."""
    today = today or (lambda: "")
    reviews, links = reviews or ReviewPolicy(), links or LinkPolicy()
    journal = RunJournal(store, clock or MonotonicClock(), lease_ttl_s=config.lease_ttl_s,
                         deadline_s=config.deadline_s, spend=spend, bundle_id=bundle_id)
    conversation = RunConversation(memory)
    flow = ApprovalFlow(approvals, tools, journal, catalog, reviews=reviews, wall_clock=wall_clock, today=today,
                        honeypots=honeypots)
    budget = RunBudget(config.token_budget, config.cost_budget, cost_per_1k_tokens)
    steps = StepRunner(journal, tools, executor or ToolStepExecutor(), flow, budget, config,
                       after_step=after_step, flagged=flagged)
    evidence = RunEvidence(catalog, partitions, steps.refreshed, conversation.earlier_questions, today)
    parts = PartChecker(getattr(answer_service, "reader", None), getattr(answer_service, "confirm_settings", None),
                        getattr(answer_service, "expander", None), getattr(answer_service, "gate", None),
                        catalog, partitions)
    synthesis = Synthesis(answer_service, journal, evidence, parts, flow, conversation, links, today=today,
                          wall_clock=wall_clock)
    return Orchestrator(journal, RunPlanning(planner, tools, journal, evidence, conversation, config), steps, flow,
                        synthesis, Delivery(journal, conversation, links, bundle_id), answer_service, router, config)
