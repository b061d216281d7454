"""Calling tools under the policy engine (DESIGN.md §10): the tools of this process and the view one
step gets of them.

`ToolRegistry` holds the tools by name and the policy engine over those with a spec (citadel/tools/
policy.py); `for_step` gives a step only the tool it names (`StepTools`), and asking that view for
another tool is refused, so nothing a document says can add a tool or call one: tools come from the
registry, calls from the plan's named step. Each call with a spec is decided by the policy engine
immediately before it runs and its response checked after; texts in a response carrying instructions
are withheld (citadel/guardrails/planted.py). A call that waits for a person (`NeedsApproval`) or that the
engine refused (`Refused`) is one of the call's ordinary outcomes, returned beside a result (`ToolOutcome`),
not raised: the step that made it branches on it. The agent's steps call through here
(citadel/agent/executor.py); a registry file's tools run over HTTP (citadel/tools/http.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from citadel.errors import InvalidRequest, InvalidToolArguments, ToolNotAllowed
from citadel.guardrails.planted import screen_tool_response
from citadel.tools.intents import IntentMatcher, RequestedAction
from citadel.tools.policy import Action, Decision, PolicyEngine
from citadel.tools.spec import RiskTier, ToolSpec
from citadel.types import Principal


@dataclass(frozen=True)
class NeedsApproval:
    """The call waits for a person: a T2 tool's call runs only once its approver group approved these
    arguments (the step parks the run until one is decided)."""

    spec: ToolSpec
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Refused:
    """The policy engine refused the call, before it ran or its response after; `reason` is the refusal's
    code (invalid_args, outside_limits, not_permitted, tool_paused, invalid_tool_response, unknown_tool)."""

    decision: Decision

    @property
    def reason(self) -> str:
        return str(self.decision.reasons[0])

    @property
    def detail(self) -> str:
        """A short sentence for the user (the engine's, which names no infrastructure)."""
        return self.decision.detail or "the tool call was refused"


# What calling a step's tool comes to: what the tool answered (JSON-able), or why it did not run.
ToolOutcome = dict[str, Any] | NeedsApproval | Refused


class Tool(Protocol):
    name: str
    tier: RiskTier  # T0 read, T1 reversible write, T2 money or hard to undo (citadel/tools/spec.py)

    def arguments(self, ask: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """The call's effective arguments (defaults filled in from the step's `ask`), checked:
        InvalidToolArguments for anything the tool does not accept. Equal results are one call."""

    def run(self, principal: Principal, arguments: Mapping[str, Any], request_id: str) -> dict[str, Any]:
        """Do the work on behalf of `principal`; a JSON-able result."""


class ToolCall(Protocol):
    """The call a plan's step makes (citadel/agent/plan.py `Step`): the tool it names, the step's ask
    (the default of a tool's main argument) and its explicit arguments."""

    @property
    def tool(self) -> str: ...

    @property
    def ask(self) -> str: ...

    @property
    def args(self) -> Mapping[str, Any]: ...


def target_checks_permission(principal: Principal, spec: ToolSpec) -> bool:
    """The live permission check of a tool call is its target system's: it verifies the user's context
    and applies the user's own rights on every call (the policy engine checks the tool's write groups)."""
    return True


class StepTools:
    """The tools one step may call: only those it names. A tool with a spec in the policy engine is
    called only when the engine says so, immediately before the call (schema, pause, permission,
    limits, tier), and its response is checked against the spec afterwards."""

    def __init__(self, tools: Mapping[str, Tool], allowed: Iterable[str], policy: PolicyEngine | None = None):
        self._tools = {name: tools[name] for name in allowed if name in tools}
        self._policy = policy

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def call(self, name: str, principal: Principal, ask: str, args: Mapping[str, Any],
             request_id: str, approved: Mapping[str, Any] | None = None) -> ToolOutcome:
        """What the tool answered, or why it did not run (it waits for an approval, or was refused).
        `approved`: the final arguments a person approved for this step (a T2 call then runs with
        them, after every check again, now)."""
        tool = self._tools.get(name)
        if tool is None:
            raise ToolNotAllowed(f"this step may call {sorted(self._tools)}, not {name!r}")
        arguments = tool.arguments(ask, approved if approved is not None else args)
        spec = self._policy.spec(name) if self._policy is not None else None
        if spec is None:
            return tool.run(principal, arguments, request_id)
        if approved is not None:
            decision = self._policy.recheck_approved(name, arguments, principal, target_checks_permission)
        else:
            decision = self._policy.decide(name, arguments, principal, target_checks_permission)
        if decision.action == Action.REFUSE:
            return Refused(decision)
        if decision.action == Action.NEEDS_APPROVAL:
            return NeedsApproval(spec, dict(arguments))
        result = tool.run(principal, arguments, request_id)
        checked = self._policy.check_response(name, result.get("result"))
        if checked.action == Action.REFUSE:
            return Refused(checked)
        screened, reasons = screen_tool_response(result.get("result"))
        if reasons:  # the system answered with text someone wrote for the model: withheld, and said so
            result = {**result, "result": screened, "screened_response": reasons}
        return {**result, "audit": decision.action == Action.RUN_AND_AUDIT}


class ToolRegistry:
    """The tools of this process, by name, and the policy engine over those with a spec."""

    def __init__(self, tools: Iterable[Tool], policy: PolicyEngine | None = None):
        self._tools = {tool.name: tool for tool in tools}
        self._policy = policy
        self._intents = IntentMatcher(policy.specs() if policy is not None else ())

    def requested_actions(self, message: str, subject: str | None) -> list[RequestedAction]:
        """The actions the user's own message asks for (citadel/tools/intents.py), with arguments this
        process's tools accept; never read from anything but the user's message."""
        if not self._intents:
            return []
        return self._intents.find(message, subject, self.names(), self.check_args)

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    @property
    def policy(self) -> PolicyEngine | None:
        return self._policy

    def spec(self, name: str) -> ToolSpec | None:
        """The named tool's spec (None for a tool built in code, like search)."""
        return self._policy.spec(name) if self._policy is not None else None

    def current_record(self, name: str, principal: Principal, args: Mapping[str, Any]) -> dict[str, Any] | None:
        """The record a write would change, as the user may read it now (None when the tool cannot say)."""
        current = getattr(self._tools.get(name), "current", None)
        return current(principal, args) if current is not None else None

    def check_args(self, name: str, args: Mapping[str, Any]) -> None:
        """For plan validation: the named tool accepts these arguments (InvalidToolArguments if not)."""
        tool = self._tools.get(name)
        if tool is None:
            raise InvalidToolArguments(f"no tool named {name!r}")
        tool.arguments("-", args)  # a placeholder ask: only explicit arguments are checked here

    def call_key(self, step: ToolCall) -> str:
        """The call a step makes, canonically: equal keys are one identical call repeated."""
        tool = self._tools.get(step.tool)
        try:
            arguments = tool.arguments(step.ask, step.args) if tool is not None else dict(step.args)
        except InvalidRequest:
            arguments = dict(step.args)
        return json.dumps([step.tool, arguments], sort_keys=True)

    def for_step(self, step: ToolCall) -> StepTools:
        return StepTools(self._tools, [step.tool], self._policy)
