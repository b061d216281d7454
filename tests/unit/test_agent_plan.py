"""The agentic path's schemas and rules: plan and reflection validation, the rules planner's split
and checklist, coverage, conflict resolution from catalog metadata, the reflection skip rule."""

from __future__ import annotations

import json

import pytest

from citadel.agent.evidence import (EvidenceSet, best_coverage, distinct_parts, missing_words, on_topic,
                                    skip_reflection, uncovered_parts)
from citadel.agent.executor import SearchTool
from citadel.agent.plan import (MAX_ASK_CHARS, MAX_PLAN_STEPS, MAX_REPLY_CHARS, PlanInvalid, find_cycle, parse_plan,
                                parse_reflection)
from citadel.agent.planner import PlanContext, RulesPlanner, split_question
from citadel.answer.conflicts import Conflict, EFFECTIVE_DATES, SUPERSEDES, resolution_note, resolve, resolved_conflicts, superseded_documents
from citadel.catalog.base import DocumentRecord
from citadel.errors import InvalidRequest
from citadel.tools.registry import ToolRegistry, ToolNotAllowed
from citadel.types import Passage

TOOLS = ("search",)


def step(id: str, ask: str = "Who approves travel?", tool: str = "search", needs=(), args=None) -> dict:
    return {"id": id, "ask": ask, "tool": tool, "args": args if args is not None else {"query": ask},
            "needs": list(needs)}


def plan(*steps: dict, done_when=("travel approval",)) -> dict:
    return {"steps": list(steps), "done_when": list(done_when)}


def registry() -> ToolRegistry:
    return ToolRegistry([SearchTool(retriever=None)])


def passage(text: str, document_id: str = "doc", title: str = "Doc", heading: str = "", score: float = 1.0,
            version: int = 1) -> Passage:
    return Passage(f"t:{document_id}:v{version}:{abs(hash(text)) % 10_000:04d}", text, document_id, title, version,
                   heading, None, f"{document_id}.md", score)


def record(document_id: str, title: str, effective_date: str | None = None, supersedes: str | None = None,
           status: str = "published") -> DocumentRecord:
    return DocumentRecord("t", document_id, title, f"{document_id}.md", "", "groups", effective_date, supersedes,
                          status, 1, 1, 1, ("staff",))


# ----------------------------------------------------------------------------- plan schema


def test_a_valid_plan_parses_from_json_text_and_from_an_object():
    raw = plan(step("s1"), step("s2", "What is the per diem?"), step("s3", "Compare them", needs=["s1", "s2"]))
    parsed = parse_plan(json.dumps(raw), TOOLS, check_args=registry().check_args)
    assert [s.id for s in parsed.steps] == ["s1", "s2", "s3"]
    assert parsed.steps[2].needs == ("s1", "s2") and parsed.done_when == ("travel approval",)
    assert parse_plan(raw, TOOLS) == parsed
    assert parsed.to_dict()["steps"][0] == {**step("s1"), "needs": []}


def test_needs_may_name_a_step_finished_earlier():
    parsed = parse_plan(plan(step("s1", needs=["p0-done"])), TOOLS, known_ids={"p0-done"})
    assert parsed.steps[0].needs == ("p0-done",)


@pytest.mark.parametrize("raw, reason", [
    ("not json {", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ("x" * (MAX_REPLY_CHARS + 1), "longer than"),
    ({"done_when": []}, "steps"),
    (plan(), "steps"),
    (plan(*[step(f"s{i}") for i in range(MAX_PLAN_STEPS + 1)]), "steps"),
    (plan(step("s1", ask="x" * (MAX_ASK_CHARS + 1))), "ask"),
    (plan(step("s1", ask="   ")), "ask"),
    ({**plan(step("s1")), "extra": 1}, "extra"),
    (plan({**step("s1"), "run_as": "admin"}), "run_as"),
    (plan(step("s1", args={"query": ["a", "list"]})), "args"),
    (plan(step("s1"), done_when=["x" * 400]), "done_when"),
    (plan(step("s1"), done_when=[f"part {i}" for i in range(40)]), "done_when"),
    (plan(step("s1"), step("s1", "again")), "not unique"),
    (plan(step("s 1")), "not a plain name"),
    (plan(step("p1.s1")), "not a plain name"),
    (plan(step("s1", tool="delete_everything")), "not one of ['search']"),
    (plan(step("s1", needs=["s9"])), "unknown steps"),
    (plan(step("s1", needs=["s1"])), "cycle"),
    (plan(step("a", needs=["c"]), step("b", needs=["a"]), step("c", needs=["b"])), "cycle"),
    (plan(step("s1", args={"query": "ok", "sql": "drop"})), "search takes query and top_k"),
    (plan(step("s1", args={"query": "ok", "top_k": 999})), "top_k"),
])
def test_an_invalid_plan_is_refused_with_its_reason(raw, reason):
    with pytest.raises(PlanInvalid) as caught:
        parse_plan(raw, TOOLS, check_args=registry().check_args)
    assert reason in caught.value.message
    assert isinstance(caught.value, InvalidRequest) and caught.value.code == "plan_invalid"


def test_find_cycle_names_the_cycle_and_ignores_known_needs():
    parsed = parse_plan(plan(step("a"), step("b", needs=["a", "old"])), TOOLS, known_ids={"old"})
    assert find_cycle(parsed) == []
    long_chain = plan(*[step(f"s{i}", needs=[f"s{i + 1}"] if i < 11 else []) for i in range(12)])
    assert [s.id for s in parse_plan(long_chain, TOOLS).steps][0] == "s0"


# ----------------------------------------------------------------------------- reflection schema


def test_a_valid_reflection_parses():
    reflection = parse_reflection(json.dumps({
        "sufficient": False, "gaps": ["tenure"], "next": "search", "next_query": "tenure requirement",
        "conflicts": [{"document_ids": ["a", "b"], "detail": "two editions", "resolved_to": "b"}]}))
    assert reflection.next == "search" and reflection.next_query == "tenure requirement"
    assert reflection.conflicts[0].resolved_to == "b"
    assert parse_reflection({"sufficient": True, "next": "finish"}).gaps == ()


@pytest.mark.parametrize("raw, reason", [
    ({"sufficient": "yes", "next": "finish"}, "sufficient"),
    ({"sufficient": True, "next": "explode"}, "next"),
    ({"sufficient": False, "next": "search"}, "next_query"),
    ({"sufficient": False, "next": "search", "next_query": "   "}, "next_query"),
    ({"sufficient": True, "next": "finish", "conflicts": [{"document_ids": ["a", "b"], "resolved_to": "c"}]},
     "resolved_to"),
    ({"sufficient": True, "next": "finish", "gaps": ["g"] * 40}, "gaps"),
    ({"sufficient": True, "next": "finish", "verdict": "trust me"}, "verdict"),
])
def test_an_invalid_reflection_is_refused(raw, reason):
    with pytest.raises(PlanInvalid) as caught:
        parse_reflection(raw)
    assert reason in caught.value.message


# ----------------------------------------------------------------------------- the rules planner


@pytest.mark.parametrize("question, parts", [
    ("Who approves travel for contractors and what is the per diem for meals?",
     ["Who approves travel for contractors", "what is the per diem for meals"]),
    ("Acme renews next month. Are they eligible for the multi-year discount?",
     ["Acme renews next month", "Are they eligible for the multi-year discount"]),
    ("What is the laptop delivery time; who handles lost laptops?",
     ["What is the laptop delivery time", "who handles lost laptops"]),
    ("Explain the per diem rates, also the booking deadline for flights",
     ["Explain the per diem rates", "the booking deadline for flights"]),
    ("Please check:\n1. the per diem for meals\n2. the lodging receipts rule",
     ["Please check: the per diem for meals", "the lodging receipts rule"]),
    # a piece too small to stand alone stays with its neighbour
    ("Is annual revenue and tenure enough for the discount?", ["Is annual revenue and tenure enough for the discount"]),
    ("Who approves travel?", ["Who approves travel"]),
    # a small piece joined to the part before it keeps the space after its separator
    ("Who approves travel for contractors and what is the per diem?",
     ["Who approves travel for contractors and what is the per diem"]),
    # the same part twice is asked once
    ("Who approves travel? Who approves travel?", ["Who approves travel"]),
])
def test_rules_split_a_question_into_its_parts(question, parts):
    assert split_question(question) == parts


def test_rules_split_keeps_at_most_the_step_allowance():
    question = "; ".join(f"what is rule number {w} about" for w in ("one", "two", "three", "four", "five"))
    parts = split_question(question, max_parts=3)
    assert len(parts) == 3 and "five" in parts[-1] and "three" in parts[-1]


def test_rules_plan_is_independent_search_steps_with_the_parts_as_done_when():
    planner = RulesPlanner()
    made = planner.plan("Who approves travel for contractors and what is the per diem for meals?",
                        PlanContext(TOOLS, check_args=registry().check_args))
    assert [(s.id, s.tool, s.needs) for s in made.steps] == [("s1", "search", ()), ("s2", "search", ())]
    assert made.steps[1].args == {"query": "what is the per diem for meals"}
    assert made.done_when == ("Who approves travel for contractors", "what is the per diem for meals")
    single = planner.plan("Who approves travel for contractors?", PlanContext(TOOLS))
    assert len(single.steps) == 1 and single.done_when == ("Who approves travel for contractors?",)
    with pytest.raises(PlanInvalid):
        planner.plan("Who approves travel?", PlanContext(("calculator",)))


def test_rules_replan_searches_the_gaps():
    made = RulesPlanner().plan("q", PlanContext(TOOLS, gaps=("tenure of the customer",)))
    assert [s.ask for s in made.steps] == ["tenure of the customer"] and made.done_when == ("tenure of the customer",)


# ----------------------------------------------------------------------------- coverage and the rules reflection

APPROVAL = passage("Contractors need approval from the contracting officer for travel.", "travel", "Travel policy")
PER_DIEM = passage("The per diem for meals is $75 per day.", "travel", "Travel policy", "Per diem")
OLD_DISCOUNT = passage("The standard discount is up to 15% on annual contracts.", "discount-2025",
                       "Discount policy 2025")
NEW_DISCOUNT = passage("The standard discount is up to 12% on annual contracts.", "discount-2026",
                       "Discount policy 2026")
DISCOUNT_RECORDS = {"discount-2025": record("discount-2025", "Discount policy 2025", "2025-01-01"),
                    "discount-2026": record("discount-2026", "Discount policy 2026", "2026-01-01", "discount-2025")}


def test_coverage_is_per_passage_and_names_the_missing_words():
    score, missing = best_coverage("per diem for meals", [APPROVAL, PER_DIEM], None)
    assert score == 1.0 and missing == set()
    parts = ["who approves contractor travel", "per diem for meals", "kayak rental allowance"]
    assert uncovered_parts(parts, [APPROVAL, PER_DIEM], None) == ["kayak rental allowance"]
    assert missing_words("per diem for kayak rentals", [PER_DIEM], None) == "kayak rentals"
    assert missing_words("kayak rental allowance", [PER_DIEM], None) == "kayak rental allowance"


def test_missing_parts_are_named_once_and_off_topic_passages_are_set_aside():
    assert distinct_parts(["what is the kayak rental allowance", "kayak rental allowance", "per diem"]) == [
        "what is the kayak rental allowance", "per diem"]
    assert on_topic(["per diem for meals"], [APPROVAL, PER_DIEM, OLD_DISCOUNT], None) == [PER_DIEM]


def test_rules_reflection_reports_gaps_and_suggests_a_search_for_the_missing_words():
    planner = RulesPlanner()
    made = parse_plan(plan(step("s1"), done_when=["contractor travel approval", "per diem for kayak rentals"]), TOOLS)
    reflection = planner.reflect("q", made, EvidenceSet((APPROVAL, PER_DIEM), {}))
    assert not reflection.sufficient and reflection.gaps == ("per diem for kayak rentals",)
    assert reflection.next == "search" and reflection.next_query == "kayak rentals"
    waiting = planner.reflect("q", made, EvidenceSet((APPROVAL,), {}, pending=("per diem?",)))
    assert waiting.next == "continue"
    done = planner.reflect("q", parse_plan(plan(step("s1"), done_when=["contractor travel approval"]), TOOLS),
                           EvidenceSet((APPROVAL,), {}))
    assert done.sufficient and done.next == "finish" and done.gaps == ()


def test_rules_reflection_resolves_version_conflicts_from_catalog_metadata():
    made = parse_plan(plan(step("s1"), done_when=["standard discount annual contracts"]), TOOLS)
    reflection = RulesPlanner().reflect("q", made, EvidenceSet((OLD_DISCOUNT, NEW_DISCOUNT), DISCOUNT_RECORDS,
                                                                today="2026-06-01"))
    [conflict] = reflection.conflicts
    assert conflict.kind == SUPERSEDES and conflict.resolved_to == "discount-2026"
    assert set(conflict.document_ids) == {"discount-2025", "discount-2026"} and "[" not in conflict.detail


def test_conflicts_resolve_only_by_reliable_metadata():
    def conflict(kind, a="a", b="b"):
        return Conflict(kind, (1, 2), (a, b), "")

    dated = {"a": record("a", "Travel policy 2025", "2025-01-01"), "b": record("b", "Travel policy", "2026-01-01")}
    assert resolve(conflict(EFFECTIVE_DATES), dated, today="2026-03-01") == "b"
    assert resolve(conflict(EFFECTIVE_DATES), dated, today="2025-06-01") == "a"  # b is not yet in force
    assert resolve(conflict(EFFECTIVE_DATES), dated, today="2024-06-01") is None  # neither is
    undated = {"a": record("a", "Travel policy"), "b": record("b", "Travel policy", "2026-01-01")}
    assert resolve(conflict(EFFECTIVE_DATES), undated, today="2026-03-01") is None
    withdrawn = {"a": record("a", "X", "2026-01-01", status="withdrawn"), "b": record("b", "X", "2025-01-01")}
    assert resolve(conflict(EFFECTIVE_DATES), withdrawn, today="2026-03-01") == "b"
    assert resolve(conflict(SUPERSEDES, "discount-2025", "discount-2026"), DISCOUNT_RECORDS) == "discount-2026"
    assert resolve(conflict(SUPERSEDES), {"a": None, "b": record("b", "X")}) is None
    found = resolved_conflicts([OLD_DISCOUNT, NEW_DISCOUNT], DISCOUNT_RECORDS)
    assert superseded_documents(found) == {"discount-2025"}
    note = resolution_note(found[0], DISCOUNT_RECORDS)
    assert note.startswith('Resolved: "Discount policy 2026" applies over "Discount policy 2025"')


def test_reflection_is_skipped_only_when_the_top_passages_cover_every_term():
    question = "Who approves contractor travel and what is the per diem for meals?"
    parts = ["Who approves contractor travel", "what is the per diem for meals"]
    assert skip_reflection(question, parts, [APPROVAL, PER_DIEM], None)
    assert not skip_reflection(question, parts, [APPROVAL], None)
    assert not skip_reflection(question + " And kayaks?", parts, [APPROVAL, PER_DIEM], None)
    assert not skip_reflection(question, parts, [], None)


# ----------------------------------------------------------------------------- tools


def test_a_step_may_call_only_the_tool_it_names():
    tools = registry()
    made = parse_plan(plan(step("s1")), TOOLS)
    view = tools.for_step(made.steps[0])
    assert view.names == ("search",)
    with pytest.raises(ToolNotAllowed):
        view.call("send_email", principal=None, ask="x", args={}, request_id="r:s1")
    # the same tool with the same (effective) arguments is one call
    a = parse_plan(plan(step("s1", "per diem", args={})), TOOLS).steps[0]
    b = parse_plan(plan(step("s1", "other words", args={"query": "per  diem"})), TOOLS).steps[0]
    assert tools.call_key(a) == tools.call_key(b)
