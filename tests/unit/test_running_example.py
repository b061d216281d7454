"""The running example (DESIGN.md §10) on the Northwind example tenant, hash embedder, rules
planner: a sales user asks "Acme renews next month. Are they eligible for the multi-year discount?".

Routed agentic, planned into independent (parallel) sub-questions; the 2026 policy's eligibility
table (3.2) turns into one check per criterion, each settled from another document (annual revenue
from the account facts, tenure from the master services agreement's start date); the 2025 policy it
supersedes is reported and resolved for 2026 from catalog metadata; the Finance-only margin model is
never read; the answer cites 3.2 and 3.3. With the agreement withdrawn, the run stops by rule and says
the tenure could not be confirmed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from citadel.ingest.sources import AclSpec, discover
from citadel.state.runs import EventType, MemoryRunStore, Run, RunStatus

NORTHWIND = Path(__file__).resolve().parents[2] / "examples" / "northwind"
QUESTION = "Acme renews next month. Are they eligible for the multi-year discount?"
HASH_GATE = {"min_vector_score": 0.0, "strong_vector_score": 0.9}
SALES = ("sales",)


@pytest.fixture
def northwind(make_runtime):
    runtime = make_runtime(answer=HASH_GATE)
    runtime.ingestor().ingest("northwind", discover([NORTHWIND], trust_front_matter=True),
                              AclSpec.from_file(NORTHWIND / "acl.yaml"))
    return runtime


def ask(runtime, question: str = QUESTION):
    store = MemoryRunStore(time.monotonic)
    store.create(Run("run-1", "northwind", "sam", "c1", question, groups=SALES))
    run = runtime.make_orchestrator(store, today=lambda: "2026-12-02").drive("run-1", "replica-a")
    events = store.events("run-1")
    [final] = [e.data for e in events if e.type == EventType.FINAL]
    return run, final, [e.data for e in events if e.type == EventType.PROGRESS]


def stage(progress: list[dict], name: str) -> list[dict]:
    return [p for p in progress if p["stage"] == name]


def test_the_sales_users_question_is_answered_from_3_2_and_3_3_with_the_conflict_resolved(northwind):
    run, final, progress = ask(northwind)
    assert run.status == RunStatus.SUCCEEDED and final["path"] == "agentic" and final["missing"] == []
    first_plan = stage(progress, "plan")[0]
    assert len(first_plan["steps"]) >= 2 and all(not s["needs"] for s in first_plan["steps"])  # parallel
    # the criteria of 3.2 became checks, each settled from another document
    cited = {(c["document_id"], c["heading"].rsplit(" > ", 1)[-1]) for c in final["citations"]}
    assert {("discount-policy-2026", "3.2 Eligibility"), ("discount-policy-2026", "3.3 Discount")} <= cited
    assert {d for d, _ in cited} >= {"acme-account-facts", "acme-msa"}
    for figure in ("up to 12%", "$740,000", "15 January 2023", "at least $500,000", "at least 2 years"):
        assert figure in final["answer"]
    # the superseded 2025 policy (retired at publish) is reported from the catalog and resolved for 2026
    [conflict] = final["conflicts"]
    assert conflict["document_ids"] == ["discount-policy-2026", "discount-policy-2025"]
    assert conflict["resolved_to"] == "discount-policy-2026" and conflict["kind"] == "supersedes"
    assert 'Resolved: "Northwind Discount Policy 2026" applies over "Northwind Discount Policy 2025"' in final["answer"]
    assert "15%" not in final["answer"] and "|" not in final["answer"]  # the table is quoted as sentences
    # the Finance-only margin model was never read by any step
    read = [chunk for step in stage(progress, "step") for chunk in step["chunk_ids"]]
    assert read and not any(":margin-model:" in chunk for chunk in read)


def test_with_the_agreement_withdrawn_the_run_stops_by_rule_and_says_the_tenure_is_unconfirmed(northwind):
    northwind.catalog.withdraw("northwind", "acme-msa", actor="test")
    run, final, progress = ask(northwind)
    assert run.status == RunStatus.STOPPED and final["stop_reason"] == "no_new_evidence"
    [missing] = final["missing"]
    assert missing.startswith("Acme: Customer tenure")
    assert final["answer"].endswith(f"could not confirm: {missing}.")
    assert "$740,000" in final["answer"] and "acme-msa" not in {c["document_id"] for c in final["citations"]}
    # the check was searched for on its own, in a re-plan, before the run gave up
    assert any(s["ask"] == missing for plan in stage(progress, "plan")[1:] for s in plan["steps"])


def test_a_predecessor_the_user_could_not_read_is_not_reported(northwind):
    """The predecessor is reported only where the user's groups could read it."""
    northwind.catalog.set_acl("northwind", "discount-policy-2025", ["board"], actor="test")
    _, final, _ = ask(northwind)
    assert final["conflicts"] == [] and "2025" not in final["answer"]


def test_a_follow_up_finds_its_case_in_the_users_earlier_question(northwind):
    """ "Are they eligible …?" names no one: the case is the one the user asked about before (their own
    words, never a source), so its criteria are still checked against Acme's documents."""
    from citadel.state.conversations import Conversation
    from citadel.types import Principal

    sam = Principal("northwind", "sam", frozenset(SALES))
    memory = northwind.conversation_memory
    memory.store.create(Conversation("conv-1", "northwind", "sam"))
    memory.record_turn("conv-1", sam, "When does the Acme agreement renew?", "On 1 January 2027.", [])
    follow_up = "Are they eligible for the multi-year discount?"
    memory.record_question("conv-1", sam, follow_up, "run-2")
    store = MemoryRunStore(time.monotonic)
    store.create(Run("run-2", "northwind", "sam", "conv-1", follow_up, groups=SALES))
    northwind.make_orchestrator(store, today=lambda: "2026-12-02").drive("run-2", "replica-a")
    [final] = [e.data for e in store.events("run-2") if e.type == EventType.FINAL]
    assert final["path"] == "agentic" and "$740,000" in final["answer"] and "15 January 2023" in final["answer"]
    # the run's answer is the conversation's next turn, recorded once
    assert [m.role for m in memory.store.messages("conv-1")] == ["user", "assistant", "user", "assistant"]
