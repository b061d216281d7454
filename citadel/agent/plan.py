"""The two schemas a planner fills in (DESIGN.md §10): a plan and a reflection checklist.

A planner — the rules backend or a model — only proposes. This module decides, in code, whether a
proposal is well formed before the orchestrator acts on it: bounded counts and lengths, unique step
ids, `needs` that name steps of the plan (or steps already finished), no dependency cycle, and each
step's tool one the step may use with arguments that tool accepts. Anything else is `PlanInvalid`,
with a reason that names the rule (never the model's text, which may be long or hostile).

Plan:       {"steps": [{"id", "ask", "tool", "args", "needs": [ids]}], "done_when": [str]}
Reflection: {"sufficient": bool, "conflicts": [...], "gaps": [str], "next": "continue" | "search" |
             "replan" | "finish", "next_query": str | null}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StringConstraints,
                      ValidationError, model_validator)

from citadel import regex
from citadel.errors import InvalidRequest, PlanInvalid

# The search tool's name: the step every plan can take (planner.py plans with it, evidence.py reads its results).
SEARCH = "search"
MAX_PLAN_STEPS = 12
MAX_STEP_ID_CHARS = 32
MAX_ASK_CHARS = 500
MAX_TOOL_NAME_CHARS = 64
MAX_ARGS = 8
MAX_ARG_KEY_CHARS = 64
MAX_ARG_CHARS = 500
MAX_NEEDS = MAX_PLAN_STEPS
MAX_DONE_WHEN = 12
MAX_CHECK_CHARS = 300
MAX_CONFLICTS = 16
MAX_GAPS = 16
MAX_DETAIL_CHARS = 500
MAX_QUERY_CHARS = 500
# A planner reply longer than this is refused unread: no plan needs more, and parsing is bounded.
MAX_REPLY_CHARS = 32_000
# Validation messages quoted in a PlanInvalid reason (the first few say enough).
MAX_REASONS = 3

STEP_ID = regex.compile("agent.plan.step_id", r"[A-Za-z][A-Za-z0-9_-]*")

NEXT_ACTIONS = ("continue", "search", "replan", "finish")
NextAction = Literal["continue", "search", "replan", "finish"]

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_ASK_CHARS)]
Check = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_CHECK_CHARS)]
ArgKey = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ARG_KEY_CHARS)]
ArgText = Annotated[str, StringConstraints(max_length=MAX_ARG_CHARS)]
ArgValue = StrictBool | StrictInt | StrictFloat | ArgText | None


class Step(BaseModel):
    """One step: a sub-question (`ask`) answered by one named tool, after the steps it `needs`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, StringConstraints(min_length=1, max_length=MAX_STEP_ID_CHARS)]
    ask: Text
    tool: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TOOL_NAME_CHARS)]
    args: dict[ArgKey, ArgValue] = Field(default_factory=dict, max_length=MAX_ARGS)
    needs: tuple[Annotated[str, StringConstraints(min_length=1, max_length=MAX_STEP_ID_CHARS * 2)], ...] = Field(
        default=(), max_length=MAX_NEEDS)


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: tuple[Step, ...] = Field(min_length=1, max_length=MAX_PLAN_STEPS)
    done_when: tuple[Check, ...] = Field(default=(), max_length=MAX_DONE_WHEN)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class ConflictNote(BaseModel):
    """Two (or a few) documents that disagree; `resolved_to` names the one that applies, if known."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    document_ids: tuple[Annotated[str, StringConstraints(min_length=1, max_length=200)], ...] = Field(
        min_length=1, max_length=4)
    kind: Annotated[str, StringConstraints(max_length=32)] | None = None
    detail: Annotated[str, StringConstraints(max_length=MAX_DETAIL_CHARS)] = ""
    resolved_to: Annotated[str, StringConstraints(max_length=200)] | None = None

    @model_validator(mode="after")
    def _resolved_to_one_of_them(self) -> "ConflictNote":
        if self.resolved_to is not None and self.resolved_to not in self.document_ids:
            raise ValueError("resolved_to must be one of document_ids")
        return self


class Reflection(BaseModel):
    """The checklist after a round: is the evidence sufficient, what conflicts, what is missing, what next."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sufficient: StrictBool
    conflicts: tuple[ConflictNote, ...] = Field(default=(), max_length=MAX_CONFLICTS)
    gaps: tuple[Check, ...] = Field(default=(), max_length=MAX_GAPS)
    next: NextAction
    next_query: Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_QUERY_CHARS)] | None = None

    @model_validator(mode="after")
    def _search_names_its_query(self) -> "Reflection":
        if self.next == "search" and not self.next_query:
            raise ValueError("next 'search' needs a next_query")
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# ---------------------------------------------------------------------- parsing
def _loaded(raw: str | Mapping[str, Any], what: str) -> Mapping[str, Any]:
    """The reply as a JSON object, or PlanInvalid."""
    if isinstance(raw, str):
        if len(raw) > MAX_REPLY_CHARS:
            raise PlanInvalid(f"{what} reply is longer than {MAX_REPLY_CHARS} characters")
        try:
            raw = json.loads(raw)
        except ValueError:
            raise PlanInvalid(f"{what} reply is not JSON") from None
    if not isinstance(raw, Mapping):
        raise PlanInvalid(f"{what} reply is not a JSON object")
    return raw


def _reasons(error: ValidationError) -> str:
    """The first few schema violations by location, without the offending values."""
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in error.errors()[:MAX_REASONS]]
    more = error.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def parse_plan(raw: str | Mapping[str, Any], tools: Collection[str], known_ids: Collection[str] = (),
               check_args: Callable[[str, Mapping[str, Any]], None] | None = None) -> Plan:
    """A validated Plan from a planner's reply (JSON text or a decoded object).

    `tools`: the tools a step may use; `known_ids`: steps already finished, which `needs` may name;
    `check_args(tool, args)`: the tool's own argument check (raises ValueError or a CitadelError)."""
    try:
        plan = Plan.model_validate(_loaded(raw, "plan"))
    except ValidationError as error:
        raise PlanInvalid(f"plan breaks the schema: {_reasons(error)}") from None
    check_steps(plan, tools, known_ids, check_args)
    return plan


def parse_reflection(raw: str | Mapping[str, Any]) -> Reflection:
    try:
        return Reflection.model_validate(_loaded(raw, "reflection"))
    except ValidationError as error:
        raise PlanInvalid(f"reflection breaks the schema: {_reasons(error)}") from None


def check_steps(plan: Plan, tools: Collection[str], known_ids: Collection[str] = (),
                check_args: Callable[[str, Mapping[str, Any]], None] | None = None) -> None:
    """Ids well formed and unique, tools allowed with valid arguments, needs known, no cycle."""
    ids = [step.id for step in plan.steps]
    for step in plan.steps:
        if not STEP_ID.fullmatch(step.id):
            raise PlanInvalid(f"step id {step.id[:MAX_STEP_ID_CHARS]!r} is not a plain name (letters, digits, _ or -)")
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise PlanInvalid(f"step ids are not unique: {duplicates}")
    for step in plan.steps:
        _check_step(step, set(ids), tools, known_ids, check_args)
    cycle = find_cycle(plan)
    if cycle:
        raise PlanInvalid(f"steps depend on each other in a cycle: {' -> '.join(cycle)}")


def _check_step(step: Step, ids: set[str], tools: Collection[str], known_ids: Collection[str],
                check_args: Callable[[str, Mapping[str, Any]], None] | None) -> None:
    if step.tool not in tools:
        raise PlanInvalid(f"step {step.id} uses tool {step.tool!r}, not one of {sorted(tools)}")
    unknown = [need for need in step.needs if need not in ids and need not in known_ids]
    if unknown:
        raise PlanInvalid(f"step {step.id} needs unknown steps {unknown}")
    if len(set(step.needs)) != len(step.needs):
        raise PlanInvalid(f"step {step.id} names a need twice")
    if check_args is not None:
        try:
            check_args(step.tool, step.args)
        except (ValueError, InvalidRequest) as error:
            raise PlanInvalid(f"step {step.id}: {error}") from None


def find_cycle(plan: Plan) -> list[str]:
    """One dependency cycle among the plan's own steps (ids in order, first repeated last), or []."""
    needs = {step.id: [n for n in step.needs] for step in plan.steps}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in needs:
        if state.get(start):
            continue
        path, stack = [start], [iter(needs[start])]
        state[start] = 1
        while stack:  # iterative depth-first search: a long chain cannot exhaust the recursion limit
            following = next(stack[-1], None)
            if following is None:
                state[path.pop()] = 2
                stack.pop()
            elif following in needs and state.get(following) == 1:
                return path[path.index(following):] + [following]
            elif following in needs and not state.get(following):
                state[following] = 1
                path.append(following)
                stack.append(iter(needs[following]))
    return []
