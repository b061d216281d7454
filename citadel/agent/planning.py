"""A run's plans and reflections, acted on by code (DESIGN.md §10).

The planner proposes a plan (JSON, checked here against the tools whatever its backend) and, after
each round, a reflection checklist; code decides what to do with it: run the planned steps that
remain, add the suggested search, re-plan for the gaps (at most MAX_REPLANS times), or finish. Each
plan ("plan:<k>") and each reflection with the action taken ("reflect:<r>") is recorded before
anything acts on it, so a resumed run replays the recorded ones and decides nothing twice. Gaps that
remain after `no_new_evidence_rounds` rounds without new relevant evidence stop the run.
"""

from __future__ import annotations

from citadel.agent.criteria import first_name
from citadel.agent.evidence import UNIFORM_IDF, EvidenceSet, RunEvidence, on_topic, skip_reflection
from citadel.agent.journal import RunJournal, RunState
from citadel.agent.memory import RunConversation
from citadel.agent.plan import MAX_PLAN_STEPS, SEARCH, Plan, Reflection, Step, check_steps
from citadel.agent.planner import PlanContext, Planner, RulesPlanner
from citadel.agent.records import LoopSignal, PlanRecord, RecordKey, ReflectionRecord, StopReason
from citadel.config import AgentConfig
from citadel.errors import PlanInvalid, Unavailable
from citadel.state.runs import EventType
from citadel.tools.registry import ToolRegistry

# The first plan and at most this many re-plans.
MAX_REPLANS = 3
# A reflection's `next`, as code acts on it (citadel/agent/plan.py NextAction).
FINISH, CONTINUE, SEARCH_NEXT, REPLAN = "finish", "continue", "search", "replan"


class RunPlanning:
    """`planner`: proposes plans and reflections (the rules read the evidence when it fails);
    `config`: the step cap and `no_new_evidence_rounds` (read when used)."""

    def __init__(self, planner: Planner, tools: ToolRegistry, journal: RunJournal, evidence: RunEvidence,
                 conversation: RunConversation, config: AgentConfig):
        self.planner = planner
        self.tools = tools
        self.journal = journal
        self.evidence = evidence
        self.conversation = conversation
        self.config = config
        self._rules = RulesPlanner()

    def requested_actions(self, state: RunState) -> list:
        """What the user's own message asks the run to do, for the case's subject (the first name in
        the message, else in the user's earlier questions)."""
        asked = (state.run.question, *reversed(self.conversation.earlier_questions(state)))
        subject = next((n for n in map(first_name, asked) if n is not None), None)
        return self.tools.requested_actions(state.run.question, subject)

    # ------------------------------------------------------------------ plans
    def plan(self, state: RunState, index: int, gaps: tuple[str, ...] = ()) -> Plan | None:
        """Plan `index` (0: the first; later: a re-plan for `gaps`), recorded; None when invalid."""
        key = RecordKey.plan(index)
        record = state.records.get(key)
        if record is None:
            record = self.journal.record(state, key, self._make_plan(state, gaps))
        if "invalid" in record:
            self.journal.emit(state, EventType.PROGRESS, key, {"stage": "plan", "invalid": record["invalid"]})
            return None
        plan = qualified(Plan.model_validate(record["plan"]), f"p{index}." if index else "")
        state.plans.append(plan)
        # A re-plan replaces the searches still to do; an action the user asked for still runs.
        state.abandoned.update(s.id for s in state.pending() if s.tool == SEARCH)
        state.graph.update((s.id, s) for s in plan.steps)
        self.journal.emit(state, EventType.PROGRESS, key, {
            "stage": "plan", "steps": [{"id": s.id, "ask": s.ask, "tool": s.tool, "needs": list(s.needs)}
                                       for s in plan.steps], "done_when": list(plan.done_when)})
        return plan

    def _make_plan(self, state: RunState, gaps: tuple[str, ...]) -> PlanRecord:
        finished = [s for s, _ in state.step_records()]
        conversation = self.conversation.context(state)
        context = PlanContext(self.tools.names(), min(MAX_PLAN_STEPS, self.config.step_cap),
                              tuple(s.id for s in finished), tuple(s.ask for s in finished), gaps,
                              state.meter, self.tools.check_args,
                              tuple(i.text for i in conversation.conversation_items()) if conversation else (),
                              () if finished else tuple(self.requested_actions(state)))
        spent = state.meter.spent
        try:
            plan = self.planner.plan(state.run.question, context)
            check_steps(plan, context.tools, context.known_ids, self.tools.check_args)  # code checks any backend
            return PlanRecord(plan=plan.to_dict(), tokens=state.meter.spent - spent)
        except (PlanInvalid, Unavailable) as error:
            return PlanRecord(invalid=error.message, code=error.code, tokens=state.meter.spent - spent)

    # ------------------------------------------------------------------ reflections
    def replay(self, state: RunState) -> LoopSignal:
        """Walk the reflections already recorded (a resumed run), applying what they decided: the
        searches they added, the re-plans they made. The last one's signal (`settle`)."""
        signal = LoopSignal.GO_ON
        while RecordKey.reflect(state.reflections + 1) in state.records:
            signal = self.settle(state, *self._reflect(state))
        return signal

    def reflect_and_settle(self, state: RunState) -> LoopSignal:
        """The next reflection, recorded, and what code does with it."""
        return self.settle(state, *self._reflect(state))

    def settle(self, state: RunState, action: str, reflection: Reflection) -> LoopSignal:
        """After a reflection: FINISH, STOPPED (the stop recorded), or GO_ON with what it added."""
        if action == FINISH and reflection.sufficient:
            return LoopSignal.FINISH
        # Gaps remain and the last rounds found nothing relevant: a stop, even where the reflection
        # has run out of searches to try.
        if state.no_new_rounds >= self.config.no_new_evidence_rounds:
            self.journal.stop(state, StopReason.NO_NEW_EVIDENCE)
            return LoopSignal.STOPPED
        if action == FINISH:
            return LoopSignal.FINISH
        return self._act(state, action, reflection)

    def _reflect(self, state: RunState) -> tuple[str, Reflection]:
        """The next reflection and the action code takes on it, both recorded before anything acts
        on them (a resumed run replays the recorded action); the no-new-evidence count updated."""
        key = RecordKey.reflect(state.reflections + 1)
        record = state.records.get(key)
        if record is None:
            made = self._make_reflection(state)
            made.action = self._action(state, Reflection.model_validate(made.reflection))
            record = self.journal.record(state, key, made)
        state.reflections += 1
        count = int(record.get("evidence", 0))
        state.no_new_rounds = state.no_new_rounds + 1 if count <= state.evidence_counts[-1] else 0
        state.evidence_counts.append(count)
        reflection = Reflection.model_validate(record["reflection"])
        self.journal.emit(state, EventType.PROGRESS, key, {
            "stage": "reflection", "skipped": record.get("skipped", False), "action": record["action"],
            **reflection.to_dict()})
        return record["action"], reflection

    def _make_reflection(self, state: RunState) -> ReflectionRecord:
        evidence = self.evidence.of(state)
        plan = state.plans[-1]
        spent = state.meter.spent
        skipped, fallback = False, None
        if skip_reflection(state.run.question, plan.done_when, evidence.passages, evidence.idf) \
                and not evidence.unsettled():
            reflection, skipped = Reflection(sufficient=True, next=FINISH), True
        else:
            try:
                reflection = self.planner.reflect(state.run.question, plan, evidence)
            except (PlanInvalid, Unavailable) as error:  # the rules still read the evidence
                reflection, fallback = self._rules.reflect(state.run.question, plan, evidence), error.message
        return ReflectionRecord(reflection.to_dict(), skipped, fallback, relevant(state, evidence),
                                state.meter.spent - spent)

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

    def _act(self, state: RunState, action: str, reflection: Reflection) -> LoopSignal:
        """Apply a reflection's action: add its search, or re-plan (a failed re-plan stops the run)."""
        if action == SEARCH_NEXT:
            # "." never occurs in a planner's ids, so this id cannot collide with a planned step.
            step_id = f"r{state.reflections}.search"
            state.graph[step_id] = Step(id="r", ask=reflection.next_query, tool=SEARCH,
                                        args={"query": reflection.next_query}).model_copy(update={"id": step_id})
        elif action == REPLAN and self.plan(state, len(state.plans), tuple(reflection.gaps)) is None:
            self.journal.stop(state, StopReason.REPLAN_FAILED)
            return LoopSignal.STOPPED
        return LoopSignal.GO_ON


def relevant(state: RunState, evidence: EvidenceSet) -> int:
    """How many passages count as evidence: those covering a part of some plan's checklist or
    settling a criteria check (a search that only brings unrelated text finds nothing new)."""
    parts = [part for plan in state.plans for part in plan.done_when] or [state.run.question]
    idf = evidence.idf or UNIFORM_IDF
    topical = {p.chunk_id for p in on_topic(parts, evidence.passages, evidence.idf)}
    settling = {p.chunk_id for p in evidence.passages for c in evidence.checks if c.met_by(p, idf)}
    return len(topical | settling) + len(evidence.acted)


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
