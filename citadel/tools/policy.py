"""The policy engine: plain code that decides whether a tool call runs.

`decide` checks, in this order, and the first failure refuses with its reason:

1. the tool exists (`unknown_tool`) — a name from a plan or a document is not a tool until the
   registry says so;
2. it is not paused for the tenant or everywhere (`tool_paused`), before anything else is looked at;
3. the arguments satisfy the tool's schema (`invalid_args`): all problems, summarised and bounded;
4. the user is permitted now (`not_permitted`): in the tool's `write_groups` (if any) and allowed by
   `permitted`, which the caller makes read the live permission source — T0 reads need it too. Only
   `True` permits: an error or any other value refuses;
5. the arguments are within `approver_limit` (`outside_limits`) — on every tier. A requester cannot
   even ask above the limit: the approver could not approve it, so a task would only wait to expire.

Then by tier: T0 runs; T1 runs, and the seeded `AuditSampler` picks `audit_share` of them for a later
audit (`run_and_audit`); T2 `needs_approval`.

Schema before permission is deliberate: a schema is not a secret, while limits come after permission
so that only someone who may use the tool learns them. An exception from `paused` or `permitted` (a
store that cannot be read) propagates: no decision is ever "run" by default.

After approval, `recheck_approved` repeats checks 1-5 for the final arguments immediately before the
write (a day may have passed: the tool may be paused, the requester's permission revoked).
`check_edit` judges a reviewer's approval or edit, `check_response` a tool's response.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from citadel.tools.schema import MAX_QUOTED_CHARS, problems, validator_for
from citadel.tools.spec import RiskTier, ToolSpec
from citadel.types import Principal

# The largest arguments and response accepted, as JSON characters: a call is not a file transfer.
MAX_ARGS_CHARS = 64_000
MAX_RESPONSE_CHARS = 1_000_000

Permitted = Callable[[Principal, ToolSpec], bool]
Paused = Callable[[str, str], bool]  # (tenant_id, tool name) -> paused?, e.g. PauseSwitch.is_paused


class Action(StrEnum):
    RUN = "run"
    RUN_AND_AUDIT = "run_and_audit"  # T1: run now, and queue the call for a later audit
    NEEDS_APPROVAL = "needs_approval"  # T2: park the run until a person decides
    REFUSE = "refuse"


class Reason(StrEnum):
    INVALID_ARGS = "invalid_args"
    OUTSIDE_LIMITS = "outside_limits"
    NOT_PERMITTED = "not_permitted"
    TOOL_PAUSED = "tool_paused"
    INVALID_TOOL_RESPONSE = "invalid_tool_response"
    UNKNOWN_TOOL = "unknown_tool"


@dataclass(frozen=True)
class Decision:
    """What to do with one call. A refusal carries its reason (one today: the first check that failed;
    a tuple so a check can add one without changing the type) and `detail`, a short sentence for the
    user that names no infrastructure and never echoes argument text (a number compared with a limit
    is shown)."""

    action: Action
    reasons: tuple[Reason, ...] = ()
    detail: str = ""

    @property
    def refused(self) -> bool:
        return self.action is Action.REFUSE


def _refuse(reason: Reason, detail: str) -> Decision:
    return Decision(Action.REFUSE, (reason,), detail)


class AuditSampler:
    """Picks the T1 calls audited later: each with probability `share`, from a seeded generator so a
    test (or an incident review) can reproduce the picks."""

    def __init__(self, seed: int | None = None):
        self._random = random.Random(seed)
        self._lock = threading.Lock()  # one stream of draws, whatever the threads

    def sample(self, share: float) -> bool:
        if not 0.0 <= share <= 1.0:  # also refuses NaN
            raise ValueError(f"an audit share is 0 to 1, got {share!r}")
        with self._lock:
            return self._random.random() < share  # random() < 1.0 always: share 1 audits every call


def _json_size(value: Any) -> int | None:
    """Length of `value` as strict JSON; None when it is not JSON (a NaN, an object, a cycle)."""
    try:
        return len(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return None


def _shown(name: str) -> str:
    return repr(name if len(name) <= MAX_QUOTED_CHARS else name[:MAX_QUOTED_CHARS] + "…")


def _number(value: float) -> str:
    if isinstance(value, int) and abs(value) >= 10**15:
        return "a very large number"  # '{:g}' would overflow converting it to float
    return f"{value:g}"


class PolicyEngine:
    def __init__(self, specs: Mapping[str, ToolSpec], paused: Paused, audit_sampler: AuditSampler):
        for name, spec in specs.items():
            if name != spec.name:
                raise ValueError(f"spec registered as {name!r} is named {spec.name!r}")
        self._specs = dict(specs)
        self._paused, self._sampler = paused, audit_sampler
        self._args = {name: validator_for(spec.args_schema) for name, spec in specs.items()}
        self._responses = {name: validator_for(spec.response_schema)
                           for name, spec in specs.items() if spec.response_schema is not None}

    def spec(self, tool_name: str) -> ToolSpec | None:
        return self._specs.get(tool_name)

    def specs(self) -> tuple[ToolSpec, ...]:
        """Every registered tool's spec, in registry order (bound to a system or not)."""
        return tuple(self._specs.values())

    # ------------------------------------------------------------------ a requester's call
    def decide(self, tool_name: str, args: Mapping[str, Any], principal: Principal,
               permitted: Permitted) -> Decision:
        spec, refusal = self._check_call(tool_name, args, principal, permitted)
        if refusal is not None:
            return refusal
        if spec.risk_tier is RiskTier.T0:
            return Decision(Action.RUN)
        if spec.risk_tier is RiskTier.T1:
            if self._sampler.sample(spec.audit_share):
                return Decision(Action.RUN_AND_AUDIT, detail=f"{spec.name} runs now and is sampled for audit")
            return Decision(Action.RUN)
        return Decision(Action.NEEDS_APPROVAL, detail=f"{spec.name} waits for approval by {spec.approver_group}")

    def recheck_approved(self, tool_name: str, args: Mapping[str, Any], requester: Principal,
                         permitted: Permitted) -> Decision:
        """Immediately before an approved call runs: every check of `decide` again, for the final
        arguments and the requester (on whose behalf the tool acts); run or refuse."""
        _, refusal = self._check_call(tool_name, args, requester, permitted)
        return refusal or Decision(Action.RUN)

    def _check_call(self, tool_name: str, args: Mapping[str, Any], principal: Principal,
                    permitted: Permitted) -> tuple[ToolSpec | None, Decision | None]:
        spec = self._specs.get(tool_name)
        if spec is None:
            return None, _refuse(Reason.UNKNOWN_TOOL, f"there is no tool named {_shown(str(tool_name))}")
        if self._paused(principal.tenant_id, spec.name):
            return spec, _refuse(Reason.TOOL_PAUSED, f"{spec.name} is paused by an administrator")
        invalid = self._invalid_args(spec, args)
        if invalid is not None:
            return spec, invalid
        if not self._may_request(spec, principal, permitted):
            return spec, _refuse(Reason.NOT_PERMITTED, f"you are not permitted to use {spec.name}")
        return spec, self._outside_limits(spec, args)

    @staticmethod
    def _may_request(spec: ToolSpec, principal: Principal, permitted: Permitted) -> bool:
        if spec.write_groups and not (spec.write_groups & principal.groups):
            return False
        return permitted(principal, spec) is True

    # ------------------------------------------------------------------ a reviewer's decision
    def check_edit(self, tool_name: str, proposed_args: Mapping[str, Any], edited_args: Mapping[str, Any],
                   reviewer: Principal, *, requester_id: str | None = None) -> Decision:
        """May `reviewer` approve the call with `edited_args` (the complete final arguments; a plain
        approval passes the proposed ones)? Run, or refuse: `not_permitted` for anyone outside the
        approver and lead groups, and for the requester approving their own request when
        `requester_id` is given; then the edit goes through the schema (`invalid_args`) and the
        limit (`outside_limits`): a reviewer cannot raise a value above the tool's limit."""
        spec = self._specs.get(tool_name)
        if spec is None:
            return _refuse(Reason.UNKNOWN_TOOL, f"there is no tool named {_shown(str(tool_name))}")
        reviewers = {group for group in (spec.approver_group, spec.lead_group) if group}
        if not reviewers & reviewer.groups:
            return _refuse(Reason.NOT_PERMITTED, f"you are not an approver of {spec.name}")
        if requester_id is not None and reviewer.user_id == requester_id:
            return _refuse(Reason.NOT_PERMITTED, "a request is approved by someone other than its requester")
        refusal = self._invalid_args(spec, edited_args) or self._outside_limits(spec, edited_args)
        if refusal is not None:
            return refusal
        changed = sorted(name for name in set(proposed_args) | set(edited_args)
                         if proposed_args.get(name) != edited_args.get(name))
        return Decision(Action.RUN, detail=f"edited: {', '.join(changed)}" if changed else "approved as proposed")

    # ------------------------------------------------------------------ the tool's answer
    def check_response(self, tool_name: str, response: Any) -> Decision:
        """Does the tool's response satisfy its `response_schema`? Run (accept) or refuse with
        `invalid_tool_response`; a tool without a response schema accepts any JSON."""
        spec = self._specs.get(tool_name)
        if spec is None:
            return _refuse(Reason.UNKNOWN_TOOL, f"there is no tool named {_shown(str(tool_name))}")
        size = _json_size(response)
        if size is None or size > MAX_RESPONSE_CHARS:
            return _refuse(Reason.INVALID_TOOL_RESPONSE, f"{spec.name} returned a response that is not JSON "
                                                         f"of at most {MAX_RESPONSE_CHARS} characters")
        validator = self._responses.get(spec.name)
        found = problems(validator, response, "response") if validator is not None else []
        if found:
            return _refuse(Reason.INVALID_TOOL_RESPONSE,
                           f"{spec.name} returned an unexpected response: {'; '.join(found)}")
        return Decision(Action.RUN)

    # ------------------------------------------------------------------ shared checks
    def _invalid_args(self, spec: ToolSpec, args: Any) -> Decision | None:
        if not isinstance(args, Mapping):
            return _refuse(Reason.INVALID_ARGS, f"the arguments for {spec.name} must be named values")
        size = _json_size(dict(args))
        if size is None or size > MAX_ARGS_CHARS:
            return _refuse(Reason.INVALID_ARGS, f"the arguments for {spec.name} must be JSON of at most "
                                                f"{MAX_ARGS_CHARS} characters (finite numbers)")
        found = problems(self._args[spec.name], dict(args), "arguments")
        if found:
            return _refuse(Reason.INVALID_ARGS, f"the arguments for {spec.name} are invalid: {'; '.join(found)}")
        return None

    @staticmethod
    def _outside_limits(spec: ToolSpec, args: Mapping[str, Any]) -> Decision | None:
        """Arguments above the limit; an absent optional argument carries nothing to compare. The
        schema has already made every limited argument a number, and the JSON check a finite one;
        int and float compare exactly, however large the int."""
        over = [f"{name} {_number(args[name])} is above the limit of {_number(limit)}"
                for name, limit in sorted(spec.approver_limit.items())
                if name in args and args[name] > limit]
        if over:
            return _refuse(Reason.OUTSIDE_LIMITS, f"{spec.name}: {'; '.join(over)}")
        return None
