"""The Planner suite (citadel/agent/planner.py): what the orchestrator relies on from whatever plans
and reflects (the rules backend, a model behind an OpenAI-compatible server).

A plan fits its context: at least one step, unique ids, only the tools offered, `needs` naming steps
of the plan, a checklist (`done_when`); the two independent questions of a message become two steps
that wait on nothing (so they run in parallel); the same question plans the same way; a plan that
cannot be made (no usable tool, an empty question) is `PlanInvalid`, never a partial plan. A
reflection is a valid checklist: with planned steps still to run and gaps it continues; on evidence
that covers the checklist it is sufficient and finishes; with nothing found and nothing pending it
names its gaps and does not stop as if it were done. A backend whose server is gone raises
`PlannerUnavailable` (the run falls back to the single-shot path).
"""

from __future__ import annotations

import pytest

from citadel.agent.evidence import EvidenceSet
from citadel.agent.executor import SearchTool
from citadel.agent.plan import NEXT_ACTIONS, Plan, PlanInvalid, Reflection
from citadel.agent.planner import PlanContext, Planner, PlannerUnavailable
from citadel.tools.registry import ToolRegistry
from citadel.types import Passage

TOOLS = ToolRegistry([SearchTool(retriever=None)])
CONTEXT = PlanContext(TOOLS.names(), check_args=TOOLS.check_args)
APPROVAL = "Who approves travel for contractors?"
PER_DIEM = "What is the per diem for meals?"
QUESTION = f"{APPROVAL} {PER_DIEM}"
ANSWERS = {APPROVAL: "Travel for contractors is approved by the contracting officer who approves each trip.",
           PER_DIEM: "The per diem for meals is 75 USD per day."}


def passage(n: int, text: str) -> Passage:
    return Passage(f"t:d{n}:v1:0000", text, f"d{n}", f"Policy {n}", 1, f"Policy {n} > Rules", None, f"d{n}.md",
                   1.0 / n)


def evidence(passages: tuple[Passage, ...] = (), pending: tuple[str, ...] = ()) -> EvidenceSet:
    return EvidenceSet(passages, {p.document_id: None for p in passages}, pending=pending)


class PlannerConformance:
    """Override `backend` (class-scoped) with the planner under test, and `broken` with one whose
    server cannot be reached where it has one."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls) -> Planner:
        raise NotImplementedError("a conformance subclass provides the planner under test")

    @pytest.fixture
    def broken(self) -> Planner:
        pytest.skip("this planner needs no server")

    @pytest.fixture(scope="class")
    @classmethod
    def plan(cls, backend) -> Plan:
        return backend.plan(QUESTION, CONTEXT)

    def test_implements_protocol(self, backend):
        assert isinstance(backend, Planner)

    def test_a_plan_fits_its_context(self, plan):
        assert isinstance(plan, Plan) and plan.steps and plan.done_when
        ids = [step.id for step in plan.steps]
        assert len(ids) == len(set(ids))
        for step in plan.steps:
            assert step.tool in CONTEXT.tools and step.ask.strip()
            assert set(step.needs) <= set(ids) - {step.id}

    def test_independent_questions_become_steps_that_wait_on_nothing(self, plan):
        independent = [step for step in plan.steps if not step.needs]
        assert len(independent) >= 2, plan.to_dict()

    def test_the_same_question_plans_the_same_way(self, backend, plan):
        assert backend.plan(QUESTION, CONTEXT) == plan

    @pytest.mark.parametrize(("question", "tools"), [("   ", TOOLS.names()), (QUESTION, ("send_email",))],
                             ids=["empty question", "no search tool"])
    def test_a_plan_that_cannot_be_made_is_plan_invalid(self, backend, question, tools):
        with pytest.raises(PlanInvalid):
            backend.plan(question, PlanContext(tools, check_args=TOOLS.check_args))

    def test_with_steps_still_to_run_a_reflection_continues(self, backend, plan):
        reflection = backend.reflect(QUESTION, plan, evidence(pending=tuple(s.ask for s in plan.steps)))
        assert isinstance(reflection, Reflection) and reflection.next in NEXT_ACTIONS
        assert not reflection.sufficient and reflection.gaps and reflection.next == "continue"

    def test_on_evidence_that_covers_the_checklist_it_is_sufficient_and_finishes(self, backend, plan):
        found = tuple(passage(n, text) for n, text in enumerate(ANSWERS.values(), start=1))
        reflection = backend.reflect(QUESTION, plan, evidence(found))
        assert reflection.sufficient and not reflection.gaps and reflection.next == "finish"

    def test_with_nothing_found_it_names_its_gaps(self, backend, plan):
        reflection = backend.reflect(QUESTION, plan, evidence())
        assert not reflection.sufficient and reflection.gaps
        assert reflection.next != "continue", "nothing is pending"
        assert reflection.next != "search" or reflection.next_query

    def test_a_planner_whose_server_is_gone_is_unavailable(self, broken):
        with pytest.raises(PlannerUnavailable):
            broken.plan(QUESTION, CONTEXT)
