"""The run loop, owned by code (DESIGN.md §10): `Orchestrator.drive(run_id, owner)`.

Code decides which step runs next, how many run at once, which tool each step may use, and when to
stop; a planner (citadel/agent/planner.py) only proposes the plan and the reflection checklist.

drive: take the run's lease → route → single-shot (`AnswerService.ask`, one answer) or agentic:
plan (a plan that cannot be made is recorded, and the run falls back to the single-shot path) →
rounds: the steps whose needs are done run in parallel (at most `max_parallel_steps` at once), each
result recorded before the next round → reflection, acted on by code: run the planned steps that
remain, add the suggested search, re-plan, or finish → synthesis from the numbered evidence through
the answer service's expander, generator and validator (`AnswerService.compose_from`) → token and
citation events, then `final` (authoritative: the validated answer, its citations, the conflicts,
the stop reason and what is missing). An eligibility question's answer opens with the decision code
computes from the numbered sources (citadel/agent/decision.py): the verdict and its cited comparisons,
or the conditional an unsettled criterion leaves.

With a reader (`answer.confirm`), a part of the checklist counts as found only when its asked fact is
confirmed (citadel/agent/parts.py), as the single-shot path confirms an answer: the answer asserts the
confirmed parts, names each other part with its closest evidence quoted and cited, and the run's
outcome is "answered" (some part confirmed), "not_confirmed" (on-topic evidence, no part confirmed)
or "refused" (nothing on topic).

Five stopping rules, checked between steps: the step cap, the run's token/cost budget, the deadline,
no new evidence in `no_new_evidence_rounds` rounds, and a repeated identical call (same tool, same
arguments). Cancellation is checked at the same points. A stopped run still answers with what it
found and names what is missing.

Resume: every decision is recorded in the run store before it is acted on (`record_step`, first
write wins): the route ("route"), each plan ("plan:<k>"), each step's result ("step:<id>"), each
reflection ("reflect:<r>"), a stop ("stop") and the synthesis ("answer"). Each call below first
looks for its record, so a driver that takes over an expired lease walks the same path, runs only
what was never recorded, and never runs a finished step again. Every event carries a `key`; the
keys already in the log are read first and an event whose key is there is not appended again, so
a client's stream shows each event once. The lease is renewed before each round and each step; a
driver whose renewal fails (another owner took the expired lease) writes nothing more. The deadline
counts from each drive's start.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import dataclasses
import datetime
import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from citadel.agent.budget import PREPAID, USER_BUDGET, RunBudget, TokenMeter, UserSpend
from citadel.agent.criteria import case_object, criteria_checks, first_name
from citadel.agent.decision import decide
from citadel.agent.memory import ConversationContext, ConversationMemory, source_refs
from citadel.agent.evidence import (UNIFORM_IDF, best_coverage, EvidenceSet, distinct_parts, evidence_lines, passage_from_record,
                                    passage_record,
                                    on_topic, passage_tokens, predecessor_ids, resolution_note, resolved_conflicts,
                                    skip_reflection, superseded_documents)
from citadel.agent.parts import (OFFER, PartCheck, asked_text, check_part, in_context, on_topic_parts,
                                 part_passages, unconfirmed_note)
from citadel.agent.plan import MAX_PLAN_STEPS, Plan, PlanInvalid, Reflection, Step, check_steps
from citadel.agent.planner import SEARCH, PlanContext, Planner, RulesPlanner
from citadel.agent.routing import run_path
from citadel.agent.checks import answer_check, single_shot_verdict
from citadel.agent.tools import (ApprovalRequired, StepContext, StepExecutor, ToolRefused, ToolRegistry,
                                 ToolStepExecutor)
from citadel.answer.gate import term_idf
from citadel.answer.links import LinkPolicy
from citadel.answer.prompt import PromptItem
from citadel.answer.confirm import ConfirmSettings
from citadel.answer.service import NOT_CONFIRMED, REFUSAL_REPLIES, outcome_of
from citadel.answer.text import content_terms
from citadel.chunking import count_tokens
from citadel.config import AgentConfig
from citadel.errors import CitadelError, NotFound, Unavailable
from citadel.guardrails.planted import with_screened_notice
from citadel.resilience.clock import Clock, MonotonicClock
from citadel.resilience.deadline import Deadline, deadline_scope
from citadel.state.conversations import ASSISTANT, USER
from citadel.state.runs import FINISHED, EventType, Run, RunStatus, RunStore
from citadel.tools.approvals import Approval, ApprovalStatus, ApprovalStore
from citadel.tools.honeypots import HoneypotPlanter
from citadel.tools.spec import RiskTier
from citadel.tools.reviews import (CLOSED, GO, HOLD, MAX_REVIEW_ROUNDS, FailedCheck, FlaggedSource, ReviewPolicy, ReviewReason, Verdict,
                                   held_body, latest_review, request_review, settle)
from citadel.tracing import emit_span
from citadel.types import Degradation, Passage, Principal

log = logging.getLogger(__name__)

SINGLE_SHOT, AGENTIC = "single_shot", "agentic"
# Stop reasons: the five rules, cancellation, and a re-plan that could not be made.
STEP_CAP, DEADLINE, NO_NEW_EVIDENCE, REPEATED_CALL = "step_cap", "deadline", "no_new_evidence", "repeated_call"
CANCELLED, REPLAN_FAILED = "cancelled", "replan_failed"
# Not a stop: the run waits for a person's approval (status WAITING) and is restarted by the decision.
PARKED = "parked"
NEEDS_APPROVAL = "needs_approval"
NEEDS_REVIEW = "needs_review"  # a failed check waits for a person (citadel/tools/reviews.py)
# The policy engine's refusals a person can settle, and the review each becomes.
REVIEWABLE = {"outside_limits": ReviewReason.ACTION_OUT_OF_SCOPE,
              "invalid_tool_response": ReviewReason.INVALID_TOOL_RESPONSE}
# A held answer's review tasks are keyed by this base (a step's by its step id).
ANSWER_REVIEW = "answer"
# A checklist part is judged by its own words only when it has at least this many distinct terms.
PART_ALONE_MIN_TERMS = 4
# The first plan and at most this many re-plans.
MAX_REPLANS = 3
# Answer text streams in token events of about this many words (more per event for a long answer).
WORDS_PER_TOKEN_EVENT = 8
MAX_TOKEN_EVENTS = 512
# Events read per page when loading the keys already in the log.
EVENT_PAGE = 1_000
FINISH, CONTINUE, SEARCH_NEXT, REPLAN = "finish", "continue", "search", "replan"
# A run with evidence but nothing on topic is refused with this reason (the single-shot gate's).
LOW_COVERAGE = "low_coverage"
# The checklist lines added to the synthesis task, in characters: with the longest message allowed,
# the task stays inside its prompt allowance (agent.prompt_allowances["task"]).
MAX_TASK_LINES_CHARS = 1_500


@runtime_checkable
class RunDriver(Protocol):
    """What starts a run's loop: the Orchestrator here, or a proxy to the orchestrator deployment."""

    def drive(self, run_id: str, owner: str) -> Run:
        """Work the run to its end (or its parking) under `owner`'s lease; the run as it then stands."""


class LeaseLost(Exception):
    """Another owner holds the run now: stop touching it, write nothing more."""


@dataclass
class RunState:
    """One drive's view of a run, rebuilt from its records and events."""

    run: Run
    principal: Principal
    deadline: Deadline
    records: dict[str, dict[str, Any]]
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

    def finished(self, step_id: str) -> bool:
        return f"step:{step_id}" in self.records

    def step_records(self) -> list[tuple[Step, dict[str, Any]]]:
        return [(s, self.records[f"step:{s.id}"]) for s in self.graph.values() if self.finished(s.id)]

    def pending(self) -> list[Step]:
        return [s for s in self.graph.values() if not self.finished(s.id) and s.id not in self.abandoned]

    def ready(self) -> list[Step]:
        return [s for s in self.pending() if all(self.finished(n) for n in s.needs)]

    def executed(self) -> int:
        return sum(1 for key in self.records if key.startswith("step:"))


class Orchestrator:
    def __init__(self, store: RunStore, answer_service, planner: Planner, tools: ToolRegistry, config: AgentConfig,
                 *, cost_per_1k_tokens: float = 0.0, clock: Clock | None = None,
                 executor: StepExecutor | None = None, after_step: Callable[[str, str], None] | None = None,
                 today: Callable[[], str] | None = None, memory: ConversationMemory | None = None,
                 approvals: ApprovalStore | None = None, wall_clock: Callable[[], float] = time.time,
                 honeypots: HoneypotPlanter | None = None, reviews: ReviewPolicy | None = None,
                 links: LinkPolicy | None = None, flagged: Callable[[str, list], None] | None = None,
                 spend: UserSpend | None = None, bundle_id: str | None = None):
        """`executor`: runs one step (injectable: a test counts executions or holds steps at a barrier);
        `after_step(run_id, step_id)`: called once a step's result and event are recorded (a test kills
        the driver there); `today`: the ISO date deciding which effective dates are in force;
        `memory`: the run's conversation (its live-checked context goes into the synthesis prompt,
        and the answer is recorded there as the assistant's turn, by whichever driver delivers it);
        `approvals`: where a T2 call's approval waits (without one, such a call fails the step);
        `wall_clock`: the time approvals escalate and expire by (shared across processes);
        `honeypots`: plants a deliberately wrong approval request now and then, to measure reviews;
        `reviews`: who reviews a failed check and for how long its task waits (citadel/tools/reviews.py;
        checks go to a person only with `approvals`, the store their tasks wait in); `links`: what the
        final answer may link to (citadel/answer/links.py; by default no link, image or HTML leaves);
        `flagged(tenant, sources)`: told of the sources a step's screen dropped (their owners' review
        tasks, citadel/tools/reviews.py `SuspiciousContentReporter`); `spend`: charges each record's
        measured tokens, beyond what starting the run paid up front, to the user's daily budget (a
        refused charge stops the run by USER_BUDGET; None: runs charge only their own budget); `bundle_id`:
        the config bundle (citadel/quality/bundle.py) recorded with the run's answer and its final event."""
        self.store = store
        self.bundle_id = bundle_id
        self.answers = answer_service
        self.planner = planner
        self.tools = tools
        self.config = config
        self.budget = RunBudget(config.token_budget, config.cost_budget, cost_per_1k_tokens)
        self.clock = clock or MonotonicClock()
        self.executor = executor or ToolStepExecutor()
        self.after_step = after_step
        self.today = today or (lambda: "")
        self._rules = RulesPlanner()
        self.memory = memory
        self.approvals = approvals
        self.wall_clock = wall_clock
        self.honeypots = honeypots
        self.reviews = reviews or ReviewPolicy()
        self.links = links or LinkPolicy()
        self.flagged = flagged
        self.spend = spend

    # ------------------------------------------------------------------ the drive
    def drive(self, run_id: str, owner: str) -> Run:
        """Work on the run while holding its lease; returns the run as it stands afterwards. A run
        another owner holds is left alone; a finished one is returned as it is."""
        run = self.store.get(run_id)
        if run is None:
            raise NotFound(f"no run {run_id!r}")
        if run.status in FINISHED or not self.store.acquire(run_id, owner, self.config.lease_ttl_s):
            return run
        state = self._load(run)
        try:
            self._drive(state, owner)
        except LeaseLost:
            return self.store.get(run_id) or run
        except Exception as error:  # outside any step (a step's failure is recorded and the run goes on)
            self._fail(state, error)
        self.store.release(run_id, owner)
        return self.store.get(run_id) or run

    def _load(self, run: Run) -> RunState:
        records = self.store.steps(run.run_id)
        principal = Principal(run.tenant_id, run.user_id, frozenset(run.groups))
        meter = TokenMeter(sum(int(r.get("tokens", 0)) for r in records.values()))
        deadline = Deadline.after(self.config.deadline_s, self.clock)
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

    def _drive(self, state: RunState, owner: str) -> None:
        self.store.update(state.run_id, status=RunStatus.RUNNING)
        self._emit(state, EventType.PROGRESS, "started", {"stage": "started"})
        with deadline_scope(state.deadline):
            path = self._route(state)
            if path == SINGLE_SHOT:
                self._renew(state, owner)
                if self._single_shot(state) == PARKED:  # the answer waits for a review
                    self.store.update(state.run_id, status=RunStatus.WAITING)
                return None
            if self._plan(state, 0, ()) is None:
                if self._fall_back(state) == PARKED:
                    self.store.update(state.run_id, status=RunStatus.WAITING)
                return None
            outcome = self._replay(state)
            if "stop" in state.records:
                stop = state.records["stop"]["reason"]
            else:
                stop = None if outcome == FINISH else self._loop(state, owner)
        if stop == PARKED:  # waiting for a person: nothing held, no lease; a decision restarts the run
            self.store.update(state.run_id, status=RunStatus.WAITING)
            return
        self._renew(state, owner)
        if self._synthesize(state, stop) == PARKED:  # the answer waits for a review
            self.store.update(state.run_id, status=RunStatus.WAITING)

    def _renew(self, state: RunState, owner: str) -> None:
        if not self.store.renew(state.run_id, owner, self.config.lease_ttl_s):
            raise LeaseLost(state.run_id)

    # ------------------------------------------------------------------ route and the single-shot path
    def _route(self, state: RunState) -> str:
        """Single-shot for simple questions (and refusals, which the answer service words); agentic
        for multi-part ones and for any request for an action, the router's or a tool's intent
        (citadel/agent/routing.py): only a run can call the tool and park it for approval."""
        record = state.records.get("route")
        if record is None:
            decision = self.answers.router.route(state.run.question)
            path = run_path(decision, lambda: self._requested_actions(state))
            record = self._record(state, "route", {"path": path})
        self.store.update(state.run_id, path=record["path"])
        self._emit(state, EventType.PROGRESS, "route", {"stage": "route", "path": record["path"]})
        return record["path"]

    def _single_shot(self, state: RunState) -> str | None:
        """The answer service's answer, checked, recorded and delivered; PARKED when a failed check
        holds it for a review (asked again, fresh, once the task is decided)."""
        if self.store.cancel_requested(state.run_id) and "answer" not in state.records:
            return self._deliver(state, self._cancelled_answer(state, []), CANCELLED, SINGLE_SHOT)
        record = state.records.get("answer")
        if record is None:
            response = self.answers.ask(state.principal, state.run.question, request_id=state.run_id)
            missing = list(response.gate.missing_terms) if (response.refused and response.gate) else []
            tokens = passage_tokens(response.passages) + count_tokens(response.answer)
            record = answer_record(response, missing, tokens)
            if self.approvals is not None:
                verdict = single_shot_verdict(self.approvals, self.reviews, self.answers.catalog, state.principal,
                                              state.run.question, response, self.today(), self.wall_clock,
                                              run_id=state.run_id)
                if verdict.action == HOLD:
                    return self._review_pending(state, verdict.task)
                if verdict.action == CLOSED:
                    record = closed_record(record, verdict)
            record = self._record(state, "answer", record)
        self._deliver(state, record, None, SINGLE_SHOT)
        return None

    def _fall_back(self, state: RunState) -> str | None:
        """The plan could not be made: the single-shot path answers, and the run says why."""
        reason = state.records["plan:0"].get("invalid", "")
        self._emit(state, EventType.PROGRESS, "fallback", {"stage": "fallback", "to": SINGLE_SHOT, "reason": reason})
        self.store.update(state.run_id, path=SINGLE_SHOT)
        return self._single_shot(state)

    # ------------------------------------------------------------------ plans
    def _plan(self, state: RunState, index: int, gaps: tuple[str, ...]) -> Plan | None:
        """Plan `index` (0: the first; later: a re-plan for `gaps`), recorded; None when invalid."""
        key = f"plan:{index}"
        record = state.records.get(key)
        if record is None:
            record = self._record(state, key, self._make_plan(state, gaps))
        if "invalid" in record:
            self._emit(state, EventType.PROGRESS, key, {"stage": "plan", "invalid": record["invalid"]})
            return None
        plan = qualified(Plan.model_validate(record["plan"]), f"p{index}." if index else "")
        state.plans.append(plan)
        # A re-plan replaces the searches still to do; an action the user asked for still runs.
        state.abandoned.update(s.id for s in state.pending() if s.tool == SEARCH)
        state.graph.update((s.id, s) for s in plan.steps)
        self._emit(state, EventType.PROGRESS, key, {
            "stage": "plan", "steps": [{"id": s.id, "ask": s.ask, "tool": s.tool, "needs": list(s.needs)}
                                       for s in plan.steps], "done_when": list(plan.done_when)})
        return plan

    def _make_plan(self, state: RunState, gaps: tuple[str, ...]) -> dict[str, Any]:
        finished = [s for s, _ in state.step_records()]
        conversation = self._conversation(state)
        context = PlanContext(self.tools.names(), min(MAX_PLAN_STEPS, self.config.step_cap),
                              tuple(s.id for s in finished), tuple(s.ask for s in finished), gaps,
                              state.meter, self.tools.check_args,
                              tuple(i.text for i in conversation.conversation_items()) if conversation else (),
                              () if finished else tuple(self._requested_actions(state)))
        spent = state.meter.spent
        try:
            plan = self.planner.plan(state.run.question, context)
            check_steps(plan, context.tools, context.known_ids, self.tools.check_args)  # code checks any backend
            return {"plan": plan.to_dict(), "tokens": state.meter.spent - spent}
        except (PlanInvalid, Unavailable) as error:
            return {"invalid": error.message, "code": error.code, "tokens": state.meter.spent - spent}

    # ------------------------------------------------------------------ the loop
    def _replay(self, state: RunState) -> str | None:
        """Walk the reflections already recorded (a resumed run), applying what they decided: the
        searches they added, the re-plans they made. Returns the last one's outcome (see `_settle`)."""
        outcome = None
        while f"reflect:{state.reflections + 1}" in state.records:
            outcome = self._settle(state, *self._reflect(state))
        return outcome

    def _loop(self, state: RunState, owner: str) -> str | None:
        """Rounds until the checklist is met (None) or a stopping rule fires (its reason, recorded)."""
        for _ in range(self.config.step_cap + MAX_REPLANS + 2):  # each round runs a step or re-plans
            reason = self._between_steps(state, owner)
            ready = state.ready() if reason is None else []
            if ready:
                reason = self._round(state, owner, ready)
            if reason == PARKED:
                return PARKED
            if reason is not None:
                return self._stop(state, reason)
            outcome = self._settle(state, *self._reflect(state))
            if outcome is not None:
                return None if outcome == FINISH else outcome
        return self._stop(state, STEP_CAP)

    def _settle(self, state: RunState, action: str, reflection: Reflection) -> str | None:
        """After a reflection: FINISH, a stop reason (recorded), or None to go on with what it added."""
        if action == FINISH and reflection.sufficient:
            return FINISH
        # Gaps remain and the last rounds found nothing relevant: a stop, even where the reflection
        # has run out of searches to try.
        if state.no_new_rounds >= self.config.no_new_evidence_rounds:
            return self._stop(state, NO_NEW_EVIDENCE)
        if action == FINISH:
            return FINISH
        return self._act(state, action, reflection)

    def _between_steps(self, state: RunState, owner: str) -> str | None:
        """Before a round: the lease is still ours, then the run-wide limits."""
        self._renew(state, owner)
        return self._limits(state)

    def _limits(self, state: RunState) -> str | None:
        """Cancellation, the deadline and the budget: the reason to start nothing new, or None."""
        if self.store.cancel_requested(state.run_id):
            return CANCELLED
        if state.deadline.expired():
            return DEADLINE
        if state.over_budget:
            return USER_BUDGET
        return self.budget.exhausted(state.meter.spent)

    def _admit(self, state: RunState, step: Step, in_flight: int, calls: set[str]) -> str | None:
        """Whether `step` may start now; the stopping rule that forbids it otherwise."""
        reason = self._limits(state)
        if reason is None and state.executed() + in_flight >= self.config.step_cap:
            reason = STEP_CAP
        if reason is None and self.tools.call_key(step) in calls:
            reason = REPEATED_CALL
        return reason

    def _round(self, state: RunState, owner: str, ready: list[Step]) -> str | None:
        """Run the ready steps, at most `max_parallel_steps` at once, recording each result as it
        comes; a stopping rule ends the round once the steps already started have finished."""
        calls = {r.get("call", "") for _, r in state.step_records()}
        queue, running, reason = list(ready), {}, None
        limit = self.config.max_parallel_steps
        with concurrent.futures.ThreadPoolExecutor(limit, thread_name_prefix="agent-step") as pool:
            while queue or running:
                while queue and reason is None and len(running) < limit:
                    self._renew(state, owner)  # between steps: still ours, or stop touching the run
                    reason = self._admit(state, queue[0], len(running), calls)
                    if reason is None:
                        step = queue.pop(0)
                        calls.add(self.tools.call_key(step))
                        # The deadline is a context variable: each step's thread gets a copy of it.
                        running[pool.submit(contextvars.copy_context().run, self._execute, state, step)] = step
                if not running:
                    break
                done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    step = running.pop(future)
                    outcome = future.result()
                    if outcome["status"] in (NEEDS_APPROVAL, NEEDS_REVIEW):
                        if outcome["status"] == NEEDS_APPROVAL:
                            self._await_approval(state, step, outcome)
                        else:
                            self._await_review(state, step, outcome)
                        reason = PARKED  # start nothing more; the steps in flight finish and are recorded
                        continue
                    self._finish_step(state, step, outcome)
                    if self.after_step is not None:
                        self.after_step(state.run_id, step.id)
        return reason

    def _execute(self, state: RunState, step: Step) -> dict[str, Any]:
        """One step on a worker thread (a span with the chunk ids it found); a failure is the step's
        result, not the run's end."""
        started = time.perf_counter()
        rounds, review = latest_review(self.approvals, state.run_id, step.id) if self.approvals else (0, None)
        try:
            if review is not None and review.status is ApprovalStatus.PENDING:
                return {"status": NEEDS_REVIEW, "passages": [], "review_id": review.approval_id}
            if review is not None and review.status is not ApprovalStatus.APPROVED:
                return {"status": "failed", "error": f"review_{review.status}", "passages": [],
                        "review_id": review.approval_id, "comment": review.comment}
            corrected = None
            if review is not None and review.reason == ReviewReason.ACTION_OUT_OF_SCOPE and review.final_args:
                # The reviewer's correction: checked against their limit when decided (an approver's edit)
                corrected = review.final_args
                step = step.model_copy(update={"args": corrected})
            approval = self._approval_for(state, step)
            if approval is not None and approval.status == ApprovalStatus.PENDING:
                return {"status": NEEDS_APPROVAL, "passages": [], "approval_id": approval.approval_id}
            if approval is not None and approval.status != ApprovalStatus.APPROVED:
                return {"status": "failed", "error": f"approval_{approval.status}", "passages": [],
                        "approval_id": approval.approval_id}
            approved = approval.final_args if approval is not None else self._approved_correction(step, corrected)
            result = self.executor.execute(StepContext(state.run_id, state.principal, approved), step,
                                           self.tools.for_step(step))
            passages = [passage_from_record(r) for r in result.get("passages", [])]
            outcome = {"status": "ok", "passages": [passage_record(p) for p in passages],
                       "degraded": [str(d) for d in result.get("degraded", [])]}
            for screened in ("screened", "screened_response"):  # what the screen kept from the model
                if result.get(screened):
                    outcome[screened] = result[screened]
            if "result" in result:  # a tool that acts: what its system answered, and whether it is audited
                outcome.update(result=result["result"], audit=bool(result.get("audit")),
                               repeated=bool(result.get("repeated")))
        except ApprovalRequired as required:
            if self.approvals is None:
                outcome = {"status": "failed", "error": required.code, "passages": []}
            else:
                outcome = {"status": NEEDS_APPROVAL, "passages": [], "tool": required.spec.name,
                           "arguments": required.arguments}
        except ToolRefused as refused:
            reason = REVIEWABLE.get(refused.code)
            if reason is not None and self.approvals is not None and rounds < MAX_REVIEW_ROUNDS:
                # a person settles it: the reviewer corrects (the arguments, or the system), asks or rejects
                outcome = {"status": NEEDS_REVIEW, "passages": [], "reason": str(reason), "tool": step.tool,
                           "arguments": dict(step.args), "detail": refused.message, "round": rounds + 1}
            else:
                outcome = {"status": "failed", "error": refused.code, "passages": []}
        except CitadelError as error:
            outcome = {"status": "failed", "error": error.code, "passages": []}
        except Exception:
            log.exception("step %s of run %s failed", step.id, state.run_id)
            outcome = {"status": "failed", "error": "internal_error", "passages": []}
        emit_span(state.run_id, f"step:{step.id}", (time.perf_counter() - started) * 1000.0,
                  [p["chunk_id"] for p in outcome["passages"]], tool=step.tool, status=outcome["status"])
        return outcome

    # ------------------------------------------------------------------ approvals
    def _approval_for(self, state: RunState, step: Step) -> Approval | None:
        """The approval this step asked for before (a resumed or restarted run), as it stands now."""
        record = state.records.get(f"approval:{step.id}")
        if record is None or self.approvals is None:
            return None
        return self.approvals.get(record["approval_id"])

    def _await_approval(self, state: RunState, step: Step, outcome: dict[str, Any]) -> None:
        """Ask for the approval (once per step: the store and the record both keep the first), tell the
        client with an `approval_required` event, and leave the step unrecorded until it is decided."""
        approval_id = outcome.get("approval_id")
        if approval_id is None:
            spec = self.tools.spec(outcome["tool"])
            now = self.wall_clock()
            approval = self.approvals.request(Approval(
                "", state.principal.tenant_id, state.run_id, step.id, spec.name, state.principal.user_id,
                outcome["arguments"], spec.approver_group, spec.lead_group,
                now + spec.escalate_after_s if spec.escalate_after_s else None,
                now + spec.expire_after_s if spec.expire_after_s else None,
                context=self._review_context(state, step, outcome["arguments"])))
            if self.honeypots is not None:  # now and then a deliberately wrong request beside it (issue 16, item 6)
                planted = self.honeypots.maybe_plant(approval, spec)
                if planted is not None:
                    self.approvals.request(planted)
            approval_id = self._record(state, f"approval:{step.id}", {"approval_id": approval.approval_id})[
                "approval_id"]
        else:
            approval = self.approvals.get(approval_id)
        self._emit(state, EventType.APPROVAL_REQUIRED, f"approval:{approval_id}", {
            "approval_id": approval_id, "step_id": step.id, "tool": approval.tool, "arguments": approval.proposed_args,
            "approver_group": approval.approver_group, "expire_at": approval.expire_at})

    def _approved_correction(self, step: Step, corrected: dict[str, Any] | None) -> dict[str, Any] | None:
        """A T2 action the tool's approver group corrected is approved by that correction (the group
        that would approve it made it, within its limit): it runs after every check again, now."""
        spec = self.tools.spec(step.tool)
        if corrected is None or spec is None or spec.risk_tier is not RiskTier.T2:
            return None
        return corrected if self.reviews.tool_reviewers(spec) == spec.approver_group else None

    def _await_review(self, state: RunState, step: Step, outcome: dict[str, Any]) -> None:
        """A step's failed check goes to a person (citadel/tools/reviews.py): the task (once per round),
        and a `review_pending` event; the step stays unrecorded until the task is decided."""
        task = self.approvals.get(outcome["review_id"]) if "review_id" in outcome else None
        if task is None:
            failed = FailedCheck(ReviewReason(outcome["reason"]), self.reviews.tool_reviewers(self.tools.spec(step.tool)),
                                 outcome["detail"], step.tool, outcome["arguments"],
                                 self._evidence_lines(state, step, outcome["arguments"]))
            task = request_review(self.approvals, failed, tenant_id=state.principal.tenant_id, run_id=state.run_id,
                                  base=step.id, round_=outcome["round"], requester=state.principal.user_id,
                                  now=self.wall_clock(), expire_after_s=self.reviews.expire_after_s)
        self._review_pending(state, task, step_id=step.id)

    def _review_pending(self, state: RunState, task: Approval, **where: str) -> str:
        """Tell the client a review task holds the run (once per task); the run then parks."""
        self._emit(state, EventType.REVIEW_PENDING, f"review:{task.approval_id}",
                   {**where, **held_body(task, task.context.get("message", ""))})
        return PARKED

    def _requested_actions(self, state: RunState) -> list:
        """What the user's own message asks the run to do, for the case's subject (the first name in
        the message, else in the user's earlier questions)."""
        subject = next((n for n in map(first_name, (state.run.question, *reversed(self._earlier_questions(state))))
                        if n is not None), None)
        return self.tools.requested_actions(state.run.question, subject)

    def _review_context(self, state: RunState, step: Step, arguments: dict[str, Any]) -> dict[str, Any]:
        """What the reviewer reads beside the proposal: the record it would change, as the requester
        may read it now, and two lines of the run's evidence with their citations."""
        return {"current": self.tools.current_record(step.tool, state.principal, arguments),
                "evidence": self._evidence_lines(state, step, arguments)}

    @staticmethod
    def _evidence_lines(state: RunState, step: Step, arguments: dict[str, Any]) -> list[dict[str, str]]:
        about = " ".join([state.run.question, step.ask, *(str(v) for v in arguments.values())])
        return evidence_lines(gathered(state.step_records()), about)

    def _finish_step(self, state: RunState, step: Step, result: dict[str, Any]) -> None:
        passages = [passage_from_record(r) for r in result["passages"]]
        tokens = count_tokens(step.ask) + passage_tokens(passages)
        record = self._record(state, f"step:{step.id}", {**result, "id": step.id, "tool": step.tool, "ask": step.ask,
                                                        "call": self.tools.call_key(step), "tokens": tokens})
        state.meter.add(int(record.get("tokens", 0)))
        self._report_screened(state, step, record)
        self._emit(state, EventType.PROGRESS, f"step:{step.id}", {
            "stage": "step", "step_id": step.id, "ask": step.ask, "tool": step.tool, "status": record["status"],
            "error": record.get("error"), "chunk_ids": [p["chunk_id"] for p in record["passages"]],
            **({"result": record["result"]} if "result" in record else {})})

    def _report_screened(self, state: RunState, step: Step, record: dict[str, Any]) -> None:
        """A step whose screen dropped something: a progress event naming the sources (never their
        text), and their owners told (once per document version, by the reporter)."""
        screened = record.get("screened") or []
        if not screened and not record.get("screened_response"):
            return
        self._emit(state, EventType.PROGRESS, f"screened:{step.id}", {
            "stage": "screened", "step_id": step.id, "tool": step.tool,
            "screened": [{"document_id": s["document_id"], "version": s["version"]} for s in screened],
            "tool_response": bool(record.get("screened_response"))})
        if self.flagged is not None and screened:
            self.flagged(state.run.tenant_id, [FlaggedSource(s["document_id"], int(s["version"]), s["chunk_id"])
                                               for s in screened])

    def _stop(self, state: RunState, reason: str) -> str:
        record = self._record(state, "stop", {"reason": reason})
        self._emit(state, EventType.PROGRESS, "stop", {"stage": "stopped", "reason": record["reason"]})
        return record["reason"]

    # ------------------------------------------------------------------ reflection
    def _reflect(self, state: RunState) -> tuple[str, Reflection]:
        """The next reflection and the action code takes on it, both recorded before anything acts
        on them (a resumed run replays the recorded action); the no-new-evidence count updated."""
        key = f"reflect:{state.reflections + 1}"
        record = state.records.get(key)
        if record is None:
            made = self._make_reflection(state)
            made["action"] = self._action(state, Reflection.model_validate(made["reflection"]))
            record = self._record(state, key, made)
        state.reflections += 1
        count = int(record.get("evidence", 0))
        state.no_new_rounds = state.no_new_rounds + 1 if count <= state.evidence_counts[-1] else 0
        state.evidence_counts.append(count)
        reflection = Reflection.model_validate(record["reflection"])
        self._emit(state, EventType.PROGRESS, key, {"stage": "reflection", "skipped": record.get("skipped", False),
                                                    "action": record["action"], **reflection.to_dict()})
        return record["action"], reflection

    def _make_reflection(self, state: RunState) -> dict[str, Any]:
        evidence = self._evidence(state)
        plan = state.plans[-1]
        spent = state.meter.spent
        if skip_reflection(state.run.question, plan.done_when, evidence.passages, evidence.idf) \
                and not evidence.unsettled():
            reflection, skipped, fallback = Reflection(sufficient=True, next=FINISH), True, None
        else:
            skipped, fallback = False, None
            try:
                reflection = self.planner.reflect(state.run.question, plan, evidence)
            except (PlanInvalid, Unavailable) as error:  # the rules still read the evidence
                reflection, fallback = self._rules.reflect(state.run.question, plan, evidence), error.message
        return {"reflection": reflection.to_dict(), "skipped": skipped, "fallback": fallback,
                "evidence": self._relevant(state, evidence), "tokens": state.meter.spent - spent}

    @staticmethod
    def _relevant(state: RunState, evidence: EvidenceSet) -> int:
        """How many passages count as evidence: those covering a part of some plan's checklist or
        settling a criteria check (a search that only brings unrelated text finds nothing new)."""
        parts = [part for plan in state.plans for part in plan.done_when] or [state.run.question]
        idf = evidence.idf or UNIFORM_IDF
        topical = {p.chunk_id for p in on_topic(parts, evidence.passages, evidence.idf)}
        settling = {p.chunk_id for p in evidence.passages for c in evidence.checks if c.met_by(p, idf)}
        return len(topical | settling) + len(evidence.acted)

    def _action(self, state: RunState, reflection: Reflection) -> str:
        """What code does with a reflection: "continue" with nothing left to run is "finish", and
        "finish" with an action still to run is "continue"; a search with no search tool is "finish"."""
        if reflection.next == CONTINUE and not state.pending():
            return FINISH
        if reflection.next == FINISH and any(s.tool != SEARCH for s in state.pending()):
            return CONTINUE  # the evidence is in; an action the user asked for still runs before the answer
        if reflection.next == SEARCH_NEXT and SEARCH not in self.tools.names():
            return FINISH
        if reflection.next == REPLAN and len(state.plans) > MAX_REPLANS:
            return FINISH
        return reflection.next

    def _act(self, state: RunState, action: str, reflection: Reflection) -> str | None:
        """Apply a reflection's action: add its search, or re-plan (a failed re-plan stops the run)."""
        if action == SEARCH_NEXT:
            # "." never occurs in a planner's ids, so this id cannot collide with a planned step.
            step_id = f"r{state.reflections}.search"
            state.graph[step_id] = Step(id="r", ask=reflection.next_query, tool=SEARCH,
                                        args={"query": reflection.next_query}).model_copy(update={"id": step_id})
        elif action == REPLAN and self._plan(state, len(state.plans), tuple(reflection.gaps)) is None:
            return self._stop(state, REPLAN_FAILED)
        return None

    def _evidence(self, state: RunState, pending: bool = True) -> EvidenceSet:
        passages = gathered(self._refreshed(state) or state.step_records())
        tenant = state.principal.tenant_id
        records = {d: self.answers.catalog.get_document(tenant, d) for d in sorted({p.document_id for p in passages})}
        # The versions they retired (never in the evidence: retired at publish), where the user's
        # groups could read them, so the conflict is reported from the catalog's metadata.
        for older in sorted(predecessor_ids(records)):
            record = self.answers.catalog.get_document(tenant, older)
            if record is not None and state.principal.groups & set(record.groups):
                records[older] = record
        partition = self.answers.partitions.get(tenant)
        idf = term_idf(partition) if partition is not None else None
        searched = tuple(str(s.args.get("query", s.ask)) for s, _ in state.step_records() if s.tool == SEARCH)
        acted = tuple(s.ask for s, r in state.step_records() if s.tool != SEARCH and r.get("status") == "ok")
        checks = tuple(criteria_checks(state.run.question, passages, self._earlier_questions(state)))
        return EvidenceSet(tuple(passages), records, idf, tuple(s.ask for s in state.pending()) if pending else (),
                           state.meter, self.today(), checks, searched, acted)

    # ------------------------------------------------------------------ synthesis and delivery
    def _synthesize(self, state: RunState, stop: str | None) -> str | None:
        """The answer, recorded and delivered; PARKED when a failed check holds it for a review."""
        record = state.records.get("answer")
        evidence = self._evidence(state, pending=False) if record is None else None
        if evidence is not None and stop == CANCELLED:
            record = self._cancelled_answer(state, self._missing(state, evidence))
        elif evidence is not None and not evidence.passages and actions_of(state):
            record = self._record(state, "answer", {  # a run that only acted: its answer is what it did or not
                "answer": actions_note(state), "outcome": outcome_of(False, None), "refused": False, "reason": None,
                "citations": [], "conflicts": [], "degraded": [], "missing": self._missing(state, evidence),
                "tokens": 0})
        elif evidence is not None:
            conflicts = resolved_conflicts(evidence.passages, evidence.records, evidence.today)
            ruled_out = superseded_documents(conflicts)
            passages = [p for p in evidence.passages if p.document_id not in ruled_out]
            checks, degraded = self._part_checks(state, evidence, passages)
            contexts = in_context(state.run.question, [c.part for c in checks or ()])
            confirmed = [contexts[c.part] for c in checks or () if c.confirmed]
            if checks and passages and not confirmed:  # nothing to assert (a part a tool did is no check)
                return self._finish_answer(state, evidence, stop, self._unconfirmed_record(
                    state, evidence, checks, degraded, passages), passages, conflicts, [], 0)
            # Only what is confirmed is asked of the generator: it asserts nothing of the other parts.
            partial = checks is not None and len(confirmed) < len(checks)
            question = asked_text(confirmed) if partial else state.run.question
            left_out = [c.part for c in checks or () if not c.confirmed]
            conversation, notes = self._context(state)
            response = self.answers.compose_from(state.principal, state.run.question, passages, state.run_id,
                                                 task=synthesis_task(state, evidence, question, left_out),
                                                 conversation=conversation, notes=notes,
                                                 asked=question if partial else None,
                                                 lead=self._decision(state, evidence))
            if response.verification is not None:  # the claim verifier's verdicts, shown in the run's events
                self._emit(state, EventType.PROGRESS, "verified",
                           {"stage": "verified", **self._outgoing_verdicts(state, response.verification)})
            tokens = count_tokens(state.run.question) + passage_tokens(passages) + count_tokens(response.answer)
            record = answer_record(response, self._missing(state, evidence, checks), tokens)
            record["degraded"] += [d for d in degraded if d not in record["degraded"]]
            record["prompt"] = response.trace.prompt if response.trace is not None else None
            # A resolution is reported where the answer rests on the version that won it.
            cited = {c["document_id"] for c in record["citations"]}
            resolved = [{**c, "note": resolution_note(c, evidence.records)} for c in conflicts
                        if c["resolved_to"] in cited]
            if resolved and not response.refused:
                record["answer"] = " ".join([record["answer"], *(c["note"] for c in resolved if c["note"])])
            if record["missing"] and not response.refused:  # a partial answer says what it lacks
                if checks is None:
                    note = missing_note(record["missing"])
                else:  # each part not confirmed with its closest evidence, cited after the answer's own
                    record["citations"] = list(record["citations"])
                    note = unconfirmed_note(named(checks, record["missing"]), record["citations"],
                                            [c.ask for c in evidence.unsettled()])
                record["answer"] = f"{record['answer']} {note}"
            return self._finish_answer(state, evidence, stop, record, passages, conflicts, resolved,
                                       response.invalid_markers)
        self._deliver(state, record, stop, AGENTIC)
        return None

    def _finish_answer(self, state: RunState, evidence: EvidenceSet, stop: str | None, record: dict[str, Any],
                       passages: list[Passage], conflicts: list[dict[str, Any]], resolved: list[dict[str, Any]],
                       invalid_markers: int) -> str | None:
        """The synthesised answer's checks, what the run did, then the record and its delivery."""
        verdict = self._answer_verdict(state, evidence, passages, conflicts, record, invalid_markers)
        if verdict.action == HOLD:
            return self._review_pending(state, verdict.task)
        if verdict.action == CLOSED:
            record = closed_record(record, verdict)
        if actions_of(state):
            record["answer"] = f"{record['answer']} {actions_note(state)}"
        record["conflicts"] = [*record["conflicts"], *resolved]
        record = self._record(state, "answer", record)
        self._deliver(state, record, stop, AGENTIC)
        return None

    def _unconfirmed_record(self, state: RunState, evidence: EvidenceSet, checks: list[PartCheck],
                            degraded: list[str], passages: list[Passage]) -> dict[str, Any]:
        """No part confirmed: with on-topic evidence the reply asserts nothing, names each part with
        its closest evidence (cited) and offers a person (not_confirmed); with none it is refused."""
        missing = self._missing(state, evidence, checks)
        settings = getattr(self.answers, "confirm_settings", None) or ConfirmSettings()
        parts = [c.part for c in checks] or [state.run.question]
        citations: list[dict] = []
        closest = [c for c in checks if c.closest]
        # On topic: a part's closest sentence names enough of its subject, or a passage holds enough of
        # its words (IDF-weighted) — the single-shot path's `topic_coverage`, without its vector signal.
        if on_topic_parts(checks, settings.topic_coverage) or (
                closest and on_topic(parts, passages, evidence.idf, settings.topic_coverage)):
            note = unconfirmed_note(named(checks, missing), citations, [c.ask for c in evidence.unsettled()])
            answer, reason = f"{note} {OFFER}", NOT_CONFIRMED
        else:
            answer, reason = REFUSAL_REPLIES[LOW_COVERAGE], LOW_COVERAGE
        tokens = count_tokens(state.run.question) + passage_tokens(passages) + count_tokens(answer)
        return {"answer": answer, "outcome": outcome_of(True, reason), "refused": True, "reason": reason,
                "citations": citations, "conflicts": [], "degraded": list(degraded), "missing": missing,
                "tokens": tokens}

    def _refreshed(self, state: RunState) -> list[tuple[Step, dict[str, Any]]]:
        """After a reviewer corrected the sources of a held answer, the run's searches made again,
        once per round (recorded): the corrected documents are new versions, and the passages the
        steps recorded are of the versions the live check now drops. Empty before any correction."""
        if self.approvals is None:
            return []
        round_, latest = latest_review(self.approvals, state.run_id, ANSWER_REVIEW)
        if latest is None or latest.status is not ApprovalStatus.APPROVED:
            return []
        key = f"refresh:{round_}"
        searches = [(s, r) for s, r in state.step_records() if s.tool == SEARCH and r.get("status") == "ok"]
        if key not in state.records:
            found = {}
            for step, _ in searches:
                result = self.executor.execute(StepContext(state.run_id, state.principal), step,
                                               self.tools.for_step(step))
                found[step.id] = [passage_record(passage_from_record(r)) for r in result.get("passages", [])]
            self._record(state, key, {"passages": found})
        again = state.records[key]["passages"]
        return [(s, {"status": "ok", "passages": again.get(s.id, [])}) for s, _ in searches]

    def _answer_verdict(self, state: RunState, evidence: EvidenceSet, passages: list[Passage],
                        conflicts: list[dict[str, Any]], record: dict[str, Any], invalid_markers: int) -> Verdict:
        """Whether the answer goes out, waits for a review, or was closed by one (citadel/tools/reviews.py)."""
        if self.approvals is None or record["refused"]:
            return Verdict(GO)
        cited = [c["document_id"] for c in record["citations"]]
        failed = answer_check(state.run.question, passages, cited, evidence.records, invalid_markers, self.reviews,
                              evidence.today, conflicts)
        return settle(self.approvals, failed, tenant_id=state.principal.tenant_id, run_id=state.run_id,
                      base=ANSWER_REVIEW, requester=state.principal.user_id, now=self.wall_clock(),
                      expire_after_s=self.reviews.expire_after_s)

    def _decision(self, state: RunState, evidence: EvidenceSet) -> Callable[[Sequence[Any]], Any]:
        """What opens an eligibility question's answer: the decision code computes from the numbered
        sources (citadel/agent/decision.py). It only makes the answer better: if it fails, the answer
        goes without it."""
        decision = functools.partial(decide, state.run.question, today=self._calendar_day(),
                                     earlier=self._earlier_questions(state), idf=evidence.idf)

        def lead(sources: Sequence[Any]) -> Any:
            try:
                return decision(sources)
            except Exception:
                log.warning("run %s: no decision (it failed)", state.run_id, exc_info=True)
                return None

        return lead

    def _calendar_day(self) -> datetime.date:
        """Today for a decision's tenure: the injected `today` where it names a date, else the wall
        clock's day (UTC); never a clock of its own."""
        try:
            return datetime.date.fromisoformat(self.today()[:10])
        except ValueError:
            return datetime.datetime.fromtimestamp(self.wall_clock(), tz=datetime.timezone.utc).date()

    def _conversation(self, state: RunState) -> ConversationContext | None:
        """The conversation so far, less this run's own question, live-checked when first needed in
        this drive: a summary line or an answer whose source the user can no longer read is not in
        it. None outside a stored conversation (a benchmark, a test)."""
        if state.context is None and self.memory is not None:
            try:
                context = self.memory.context(state.run.conversation_id, state.principal)
            except NotFound:
                return None
            state.context = dataclasses.replace(context, turns=tuple(m for m in context.turns
                                                                     if m.run_id != state.run_id))
        return state.context

    def _context(self, state: RunState) -> tuple[list[PromptItem], list[PromptItem]]:
        """The conversation part and the notes part of the synthesis prompt."""
        context = self._conversation(state)
        return (context.conversation_items(), context.note_items()) if context is not None else ([], [])

    def _earlier_questions(self, state: RunState) -> tuple[str, ...]:
        """What the user asked before in this conversation, in their own words, oldest first."""
        context = self._conversation(state)
        if context is None:
            return ()
        return (*(line.text for line in context.summary if line.source is None),
                *(m.content for m in context.turns if m.role == USER))

    def _remember_turn(self, state: RunState, record: dict[str, Any]) -> None:
        """The answer as the conversation's assistant turn, once (a resumed driver finds it there)."""
        if self.memory is None:
            return
        try:
            messages = self.memory.store.messages(state.run.conversation_id)
            if not any(m.run_id == state.run_id and m.role == ASSISTANT for m in messages):
                self.memory.record_answer(state.run.conversation_id, state.principal, record["answer"],
                                          source_refs(record["citations"]), state.run_id)
        except NotFound:
            return

    @staticmethod
    def _parts(state: RunState) -> list[str]:
        """The checklist parts (of the first plan), then the asks of steps that failed or never ran."""
        first = state.plans[0].done_when if state.plans else ()
        checklist = list(first) or [state.run.question]
        unanswered = [s.ask for s, r in state.step_records() if r.get("status") != "ok"]
        unanswered += [s.ask for s in state.pending()]
        return list(dict.fromkeys(checklist + unanswered))

    def _missing(self, state: RunState, evidence: EvidenceSet, checks: list[PartCheck] | None = None) -> list[str]:
        """The parts (`_parts`) not found, then the criteria no passage settles. With a reader a part
        is found only when its asked fact is confirmed (`checks`, else confirmed now over the
        evidence); without one, when some evidence passage covers it (the lexical rule)."""
        if checks is None:
            checks, _ = self._part_checks(state, evidence, list(evidence.passages))
        if checks is None:
            missing = evidence.uncovered(self._parts(state))
        else:
            missing = [c.part for c in checks if not c.confirmed]
        return distinct_parts(missing) + [c.ask for c in evidence.unsettled()]

    def _part_checks(self, state: RunState, evidence: EvidenceSet,
                     passages: list[Passage]) -> tuple[list[PartCheck] | None, list[str]]:
        """(each part confirmed or not, with its closest evidence; what degraded): None without a
        reader (the answer service's, so a run and a single-shot answer confirm alike). Only passages
        the user can still read are read; a reader that fails confirms nothing (`reader_skipped`)."""
        reader = getattr(self.answers, "reader", None)
        if reader is None:
            return None, []
        settings = getattr(self.answers, "confirm_settings", None) or ConfirmSettings()
        parts = [p for p in self._parts(state) if p not in evidence.acted]
        live = self.answers.catalog.readable_documents(state.principal)
        passages = [p for p in passages if (doc := live.get(p.document_id)) is not None and doc.version == p.version]
        partition = self.answers.partitions.get(state.principal.tenant_id)
        searches = [(step.ask.lower(), [p["chunk_id"] for p in record.get("passages", [])])
                    for step, record in state.step_records() if step.tool == SEARCH and record.get("status") == "ok"]
        contexts = in_context(state.run.question, parts)
        checks, degraded = [], []
        for part in parts:
            asked = contexts[part]  # its own searches: the part's, and those of the situation it asks of
            own = [ids for ask, ids in searches if ask and ask in asked.lower()]
            chosen = part_passages(asked, passages, evidence.idf, own)
            sources = self.answers.expander.expand(chosen, partition) if chosen else []
            # The single-shot gate's word rule on the part's own passages: the part's words are there,
            # so a slot-holding sentence naming enough of its subject confirms it (confirm.py).
            # (the part alone or in its context: "Are they eligible for the multi-year discount?" names its
            # section's words; its lead-up "Acme renews next month." does not)
            # A part read alone must name enough to be judged: "Am I due for a replacement" matches anything.
            texts = (part, asked) if len(set(content_terms(part))) >= PART_ALONE_MIN_TERMS else (asked,)
            covered = bool(chosen) and max(best_coverage(text, chosen, evidence.idf or UNIFORM_IDF)[0]
                                           for text in texts) >= self.answers.gate.thresholds.min_coverage
            try:
                checks.append(check_part(reader, part, sources, settings, asked, covered))
            except Exception:  # nothing can be confirmed, so nothing is asserted (as on the single-shot path)
                log.warning("run %s: the reader failed; part not confirmed", state.run_id, exc_info=True)
                checks.append(PartCheck(part, False, None, sources[0] if sources else None))
                degraded = [str(Degradation.READER_SKIPPED)]
        return checks, degraded

    def _cancelled_answer(self, state: RunState, missing: list[str]) -> dict[str, Any]:
        return self._record(state, "answer", {"answer": "", "outcome": outcome_of(True, CANCELLED), "refused": True,
                                              "reason": CANCELLED, "citations": [], "conflicts": [], "degraded": [],
                                              "missing": missing, "tokens": 0})

    def _deliver(self, state: RunState, record: dict[str, Any], stop: str | None, path: str) -> None:
        """The conversation's turn, token and citation events, then the authoritative final event
        (with what the synthesis prompt held), then the run's status."""
        record = self._outgoing(state, record)
        if stop is None and state.over_budget:  # the answer was given, its spend was not: the budget stopped it
            stop = USER_BUDGET
        self._remember_turn(state, record)
        if record.get("prompt"):
            self._emit(state, EventType.PROGRESS, "prompt", {"stage": "prompt", **record["prompt"]})
        for index, piece in enumerate(token_pieces(record["answer"])):
            self._emit(state, EventType.TOKEN, f"token:{index}", {"text": piece})
        for number, citation in enumerate(record["citations"], start=1):
            self._emit(state, EventType.CITATION, f"citation:{number}", {"number": number, **citation})
        self._emit(state, EventType.FINAL, "final", {
            "answer": record["answer"], "outcome": record_outcome(record),
            "refused": record["refused"], "reason": record["reason"],
            "citations": record["citations"], "conflicts": record["conflicts"], "degraded": record["degraded"],
            "path": path, "stop_reason": stop, "missing": record["missing"], "steps": state.executed(),
            "actions": actions_of(state),
            # the recorded answer's bundle: a run resumed under another config names the one that answered
            "bundle_id": record.get("bundle_id", self.bundle_id)})
        status = (RunStatus.SUCCEEDED if stop is None else RunStatus.CANCELLED if stop == CANCELLED
                  else RunStatus.STOPPED)
        self.store.update(state.run_id, status=status, stop_reason=stop)

    def _outgoing(self, state: RunState, record: dict[str, Any]) -> dict[str, Any]:
        """The answer as it may leave: a source a step's screen dropped is named in one plain sentence
        (once: the synthesis may have said it already), and the links policy applied, so neither the
        token events cut from it nor the final event carry an image, HTML or a foreign link."""
        answer = record.get("answer") or ""
        if any(r.get("screened") or r.get("screened_response") for _, r in state.step_records()):
            answer = with_screened_notice(answer)
        return {**record, "answer": self.links.clean(answer, state.run.tenant_id)}

    def _outgoing_verdicts(self, state: RunState, verification: dict[str, Any]) -> dict[str, Any]:
        """The verifier's verdicts as an event may carry them: their claim texts (drafts, before the
        links policy) cleaned like the answer, so no event carries an image or a foreign link."""
        clean = lambda text: self.links.clean(text, state.run.tenant_id) if isinstance(text, str) else text  # noqa: E731
        verdicts = [{**v, "claim": clean(v.get("claim")), "corrected": clean(v.get("corrected"))}
                    for v in verification.get("verdicts", [])]
        return {**verification, "verdicts": verdicts}

    def _fail(self, state: RunState, error: Exception) -> None:
        """An error outside any step: the run fails with an error event (a CitadelError's own code and
        message; anything else is `internal_error`, its details in the server log)."""
        if isinstance(error, CitadelError):
            code, message = error.code, error.message
        else:
            log.exception("run %s failed", state.run_id, exc_info=error)
            code, message = "internal_error", "the run failed"
        self._emit(state, EventType.ERROR, "error", {"code": code, "message": message})
        self.store.update(state.run_id, status=RunStatus.FAILED, stop_reason=code)

    # ------------------------------------------------------------------ the store
    def _record(self, state: RunState, key: str, result: dict[str, Any]) -> dict[str, Any]:
        """Record a decision or result; the first record wins (a resumed run reads the stored one). A
        record that spent tokens charges them to the user's budget first (once: a replayed record is
        already stored)."""
        if "tokens" in result and key not in state.records:
            result = {**result, **self._charge(state, int(result["tokens"]))}
        if key == "answer" and self.bundle_id is not None:  # the bundle that made it, kept with it
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

    def _emit(self, state: RunState, type: EventType, key: str, data: dict[str, Any]) -> None:
        """Append an event once: one whose key is already in the log is not appended again."""
        if key in state.emitted:
            return
        self.store.append(state.run_id, type, {"key": key, **data})
        state.emitted.add(key)


# ---------------------------------------------------------------------- helpers
def qualified(plan: Plan, prefix: str) -> Plan:
    """The plan with its step ids prefixed (a re-plan's "s1" is not the first plan's "s1"); a need
    naming a step of the same plan follows the rename, one naming a finished step keeps its id."""
    if not prefix:
        return plan
    own = {s.id for s in plan.steps}
    steps = tuple(s.model_copy(update={"id": prefix + s.id,
                                       "needs": tuple(prefix + n if n in own else n for n in s.needs)})
                  for s in plan.steps)
    return plan.model_copy(update={"steps": steps})


def gathered(step_records: list[tuple[Step, dict[str, Any]]]) -> list[Passage]:
    """The passages of the successful steps, taken in turn from each step (best first within a
    step) so every sub-question is represented among the first sources; each chunk once."""
    lists = [[passage_from_record(p) for p in record.get("passages", [])]
             for _, record in step_records if record.get("status") == "ok"]
    seen: set[str] = set()
    passages: list[Passage] = []
    for rank in range(max((len(ps) for ps in lists), default=0)):
        for ps in lists:
            if rank < len(ps) and ps[rank].chunk_id not in seen:
                seen.add(ps[rank].chunk_id)
                passages.append(ps[rank])
    return passages


def actions_of(state: RunState) -> list[dict[str, Any]]:
    """The steps that called a tool other than search: what each did (its system's answer) or why not."""
    return [{"step_id": step.id, "tool": step.tool, "status": record.get("status"), "error": record.get("error"),
             "result": record.get("result"), **({"comment": record["comment"]} if record.get("comment") else {})}
            for step, record in state.step_records() if step.tool != SEARCH]


def actions_note(state: RunState) -> str:
    """What the run did and what it could not do, naming each record its tools made by id."""
    sentences = []
    for action in actions_of(state):
        if action["status"] == "ok":
            result = action["result"] if isinstance(action["result"], dict) else {}
            ids = [f"{k} {v}" for k, v in result.items() if k.endswith("_id") and k != "account_id" and
                   k != "external_id" and isinstance(v, (str, int))]
            sentences.append(f"Done: {action['tool']}" + (f" ({', '.join(ids)})." if ids else "."))
        else:
            said = f": {action['comment']}" if action.get("comment") else ""  # a reviewer's word, to the requester
            sentences.append(f"Not done: {action['tool']} ({action['error']}{said}).")
    return " ".join(sentences)


def closed_record(record: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """What a run answers when the review of its held answer did not correct it: nothing of the held
    answer, and what the reviewer said."""
    reason = f"review_{verdict.task.status}"
    return {**record, "answer": f"The answer was held for a review ({verdict.task.reason}). {verdict.closed_message}",
            "outcome": outcome_of(True, reason), "refused": True, "reason": reason, "citations": [], "conflicts": []}


def named(checks: Sequence[PartCheck], missing: Sequence[str]) -> list[PartCheck]:
    """The checks of the parts the answer names as missing (a part another one repeats is not)."""
    return [c for c in checks if c.part in set(missing)]


def missing_note(missing: list[str]) -> str:
    """The sentence a partial answer ends with, naming what the documents did not confirm."""
    return "The documents found could not confirm: " + "; ".join(missing) + "."


def synthesis_task(state: RunState, evidence: EvidenceSet, question: str | None = None,
                   left_out: Sequence[str] = ()) -> str:
    """What the answer must cover beyond the question, one line each: the first plan's checklist,
    what the case asks to be eligible for (so the rule's grant is quoted), each criterion as the
    rule states it, then each as a fact about the case (so the quote for it is the fact, the rule's
    own wording being quoted already). `question`: what synthesis answers (the run's question, or
    only its confirmed parts); `left_out`: parts not confirmed, which the answer must not assert."""
    question_terms = set(content_terms(question or state.run.question))
    checklist = [p for p in (state.plans[0].done_when if state.plans else ()) if p not in left_out]
    lines = [*checklist, case_object(state.run.question) or "",
             *(f"{c.criterion}: {c.requirement}" for c in evidence.checks), *(c.ask for c in evidence.checks)]
    kept, size = [], 0
    for line in dict.fromkeys(lines):
        if line.strip() and set(content_terms(line)) != question_terms and size + len(line) <= MAX_TASK_LINES_CHARS:
            kept.append(line)
            size += len(line) + 1
    return "\n".join(kept)


def record_outcome(record: dict[str, Any]) -> str:
    """The outcome of an answer record or a final event's data, derived from `refused` and `reason`
    (one kept before answers carried their outcome has none)."""
    return outcome_of(record["refused"], record["reason"])


def run_outcome(steps: dict[str, dict[str, Any]]) -> str | None:
    """A run's outcome from its recorded steps (`RunStore.steps`): its answer's; None before it answers."""
    record = steps.get("answer")
    return record_outcome(record) if record is not None else None


def answer_record(response, missing: list[str], tokens: int) -> dict[str, Any]:
    """What the run keeps of an answer (the answer service's response) for its final event."""
    return {"answer": response.answer, "outcome": outcome_of(response.refused, response.reason),
            "refused": response.refused, "reason": response.reason,
            "citations": [dict(c) for c in response.citations], "conflicts": [dict(c) for c in response.conflicts],
            "degraded": [str(d) for d in response.degraded], "missing": list(missing), "tokens": tokens}


def token_pieces(answer: str) -> list[str]:
    """The answer in pieces of a few words; joined, they are the answer exactly."""
    words = answer.split(" ")
    if not answer:
        return []
    size = max(WORDS_PER_TOKEN_EVENT, math.ceil(len(words) / MAX_TOKEN_EVENTS))
    groups = [" ".join(words[i:i + size]) for i in range(0, len(words), size)]
    return [groups[0], *(" " + g for g in groups[1:])]
