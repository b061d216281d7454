"""A tool as an operator declares it (`ToolSpec`), and the registry file they are read from.

The registry is a YAML file, `tools: [ {name, description, args_schema, risk_tier, ...}, ... ]`. It is
operator-written configuration, so every problem is refused at load with `InvalidToolSpec` naming the
tool and the field, never discovered at call time. Documents and models cannot add a tool: the
registry is read from this file only.

Risk tiers (DESIGN.md §10): T0 read; T1 reversible write, runs at once, a share (`audit_share`) is
sampled for a later audit; T2 money or hard to undo, a person in `approver_group` approves, the task
escalates to `lead_group` after `escalate_after_s` and counts as rejected after `expire_after_s`.

Settings that mean nothing for a tier are refused rather than ignored (a lead group or escalation on a
T1, an explicit audit share on a T2, write groups on a read): an operator who writes one believes it
does something. `approver_limit` applies to every tier: it caps what any call may carry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from citadel.errors import InvalidToolSpec
from citadel.tools.schema import SchemaProblem, check_tool_schema, linear_pattern

# `crm.create_discount_approval`: lower-case segments joined by dots (one segment, like the built-in
# `search`, is allowed). Checked with a FULL match.
TOOL_NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,63}(?:\.[a-z][a-z0-9_]{0,63}){0,3}", re.ASCII)
# The pause switch names the model with this word, so no tool may take it.
MODEL_TARGET = "model"
MAX_DESCRIPTION_CHARS = 2_000
MAX_INTENT_PATTERN_CHARS = 500
MAX_GROUP_CHARS = 256
MAX_REGISTRY_BYTES = 1024 * 1024
MAX_TOOLS = 1_000
# An approval that waits longer than this is a misconfiguration (a typo of units, most likely).
MAX_APPROVAL_WAIT_S = 30 * 86_400.0
DEFAULT_AUDIT_SHARE = 0.05


class RiskTier(StrEnum):
    """How much a call can do, and so what it takes to run (every tool, `search` included, has one)."""

    T0 = "T0"  # read
    T1 = "T1"  # reversible write: runs at once, a share audited later
    T2 = "T2"  # money or hard to undo: a person approves


class _FieldProblem(ValueError):
    """A cross-field rule broken, raised inside the model so the loader can name the field."""

    def __init__(self, field: str, problem: str):
        super().__init__(problem)
        self.field = field


def _plain_group(group: str) -> str:
    if group != group.strip() or not group.isprintable():
        raise ValueError("a group name has no surrounding spaces or control characters")
    return group


Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]  # strict: YAML `true` is not 1
GroupName = Annotated[str, Field(min_length=1, max_length=MAX_GROUP_CHARS), AfterValidator(_plain_group)]


# "{name}" in a binding's path: an argument's value, URL-quoted, goes there.
PATH_PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]{0,63})\}", re.ASCII)
KEY_PLACEHOLDER = "key"


class HttpBinding(BaseModel):
    """How a tool reaches its system over HTTP: `endpoint` names a base URL in config
    (`tools.endpoints`), `path` takes arguments as "{name}" placeholders, the other arguments go in
    the JSON body (POST) or the query (GET). A write names the body field that carries its
    idempotency key (`idempotency_field`, derived from run and step) and may name a GET `lookup_path`
    ("…?external_id={key}") that finds the record an earlier attempt made, looked up before creating.
    A write may also name a GET `current_path` (argument placeholders) that reads the record the call
    would change, as it stands: a reviewer sees the proposal against it (the approval's diff)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,63}$")
    method: str = Field(pattern=r"^(GET|POST)$")
    path: str = Field(pattern=r"^/[A-Za-z0-9_{}/.?=&-]{0,300}$")
    idempotency_field: str | None = Field(None, pattern=r"^[a-z][a-z0-9_]{0,63}$")
    lookup_path: str | None = Field(None, pattern=r"^/[A-Za-z0-9_{}/.?=&-]{0,300}$")
    current_path: str | None = Field(None, pattern=r"^/[A-Za-z0-9_{}/.?=&-]{0,300}$")

    def placeholders(self) -> set[str]:
        return set(PATH_PLACEHOLDER.findall(self.path))


def intent_pattern(pattern: str):
    """An intent's pattern compiled case-insensitive on RE2 (SchemaProblem when RE2 refuses it)."""
    return linear_pattern(f"(?i){pattern}")


class ActionIntent(BaseModel):
    """How the rules planner recognises a user asking for this tool in their own message (never in a
    document or a tool's reply: citadel/tools/intents.py): a case-insensitive RE2 `pattern` whose named
    groups are arguments, and the argument the case's subject fills when no group did (`subject_arg`:
    "Acme" in "Acme renews next month…" → "acme")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pattern: str = Field(min_length=1, max_length=MAX_INTENT_PATTERN_CHARS)
    subject_arg: str | None = None


class ToolSpec(BaseModel):
    """One tool. Immutable; treat the schema mappings as read-only too."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = Field(min_length=1, max_length=MAX_DESCRIPTION_CHARS)
    args_schema: dict[str, Any]
    response_schema: dict[str, Any] | None = None
    risk_tier: RiskTier
    approver_group: GroupName | None = None
    lead_group: GroupName | None = None
    # argument name -> the largest value a proposal or an edit may carry (e.g. {discount_pct: 15})
    approver_limit: dict[str, Number] = Field(default_factory=dict)
    escalate_after_s: Number | None = None
    expire_after_s: Number | None = None
    audit_share: Number = Field(DEFAULT_AUDIT_SHARE, ge=0.0, le=1.0)
    # the user groups allowed to request the write; empty: anyone the live permission check allows
    write_groups: frozenset[GroupName] = frozenset()
    http: HttpBinding | None = None  # how the tool is called (None: a tool built in code, e.g. search)
    intent: ActionIntent | None = None  # how a user's message asks for it (the rules planner)

    @field_validator("name")
    @classmethod
    def _dotted_lowercase(cls, name: str) -> str:
        if TOOL_NAME_PATTERN.fullmatch(name) is None:
            raise ValueError("must be dotted lower-case words such as 'crm.get_account' "
                             "(a-z, 0-9, '_'; each word starts with a letter; at most 4 words)")
        if name == MODEL_TARGET:
            raise ValueError(f"{MODEL_TARGET!r} is reserved: the pause switch names the model with it")
        return name

    @field_validator("args_schema")
    @classmethod
    def _closed_args_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        check_tool_schema(schema, closed=True)
        return schema

    @field_validator("response_schema")
    @classmethod
    def _valid_response_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None:
            check_tool_schema(schema, closed=False)
        return schema

    @model_validator(mode="after")
    def _fits_its_tier(self) -> ToolSpec:
        self._check_limits()
        if self.http is not None:
            self._check_binding(self.http)
        if self.intent is not None:
            self._check_intent(self.intent)
        if self.risk_tier is RiskTier.T2:
            self._check_approval_settings()
        else:
            for field in ("lead_group", "escalate_after_s", "expire_after_s"):
                if getattr(self, field) is not None:
                    raise _FieldProblem(field, f"only T2 tools wait for an approval; this one is {self.risk_tier}")
        if self.risk_tier is not RiskTier.T1 and "audit_share" in self.model_fields_set:
            raise _FieldProblem("audit_share", f"only T1 calls are sampled for audit; this tool is {self.risk_tier}")
        if self.risk_tier is RiskTier.T0 and self.write_groups:
            raise _FieldProblem("write_groups", "a T0 tool reads; who may read is the live permission check")
        return self

    def _check_binding(self, http: HttpBinding) -> None:
        """Every path placeholder is a required argument; a write carries its idempotency key, which
        is not an argument anyone can set; a lookup finds the record by that key."""
        properties = self.args_schema.get("properties", {})
        required = set(self.args_schema.get("required", []))
        for name in sorted(http.placeholders()):
            if name not in properties or name not in required:
                raise _FieldProblem("http", f"path placeholder {{{name}}} must be a required argument")
        writes = self.risk_tier is not RiskTier.T0
        if writes and (http.method != "POST" or http.idempotency_field is None):
            raise _FieldProblem("http", "a write is a POST that names its idempotency_field")
        if http.idempotency_field is not None and http.idempotency_field in properties:
            raise _FieldProblem("http", f"{http.idempotency_field!r} carries the key; it cannot be an argument")
        if http.lookup_path is not None and set(PATH_PLACEHOLDER.findall(http.lookup_path)) != {KEY_PLACEHOLDER}:
            raise _FieldProblem("http", "lookup_path finds the record by its key alone: one {key} placeholder")
        if http.current_path is not None:
            if not writes:
                raise _FieldProblem("http", "current_path shows what a write would change; a T0 tool changes nothing")
            for name in sorted(set(PATH_PLACEHOLDER.findall(http.current_path))):
                if name not in properties or name not in required:
                    raise _FieldProblem("http", f"current_path placeholder {{{name}}} must be a required argument")

    def _check_intent(self, intent: ActionIntent) -> None:
        """Its pattern runs on RE2; its groups and subject are arguments; together they fill every
        required argument."""
        try:
            groups = set(intent_pattern(intent.pattern).groupindex)
        except SchemaProblem as problem:
            raise _FieldProblem("intent", str(problem)) from None
        properties = self.args_schema.get("properties", {})
        filled = groups | ({intent.subject_arg} if intent.subject_arg else set())
        unknown = sorted(filled - set(properties))
        if unknown:
            raise _FieldProblem("intent", f"{', '.join(unknown)} are not arguments of this tool")
        unfilled = sorted(set(self.args_schema.get("required", [])) - filled)
        if unfilled:
            raise _FieldProblem("intent", f"nothing fills the required arguments {', '.join(unfilled)}")

    def _check_limits(self) -> None:
        properties = self.args_schema.get("properties", {})
        for argument in self.approver_limit:
            if argument not in properties:
                raise _FieldProblem("approver_limit", f"{argument!r} is not an argument of this tool")
            declared = properties[argument]
            if not isinstance(declared, Mapping) or declared.get("type") not in ("number", "integer"):
                raise _FieldProblem("approver_limit", f"argument {argument!r} must have type number or integer "
                                                      "to carry a limit")

    def _check_approval_settings(self) -> None:
        if self.approver_group is None:
            raise _FieldProblem("approver_group", "a T2 tool needs the group that approves its calls")
        for field in ("escalate_after_s", "expire_after_s"):
            value = getattr(self, field)
            if value is None or not 0.0 < value <= MAX_APPROVAL_WAIT_S:
                raise _FieldProblem(field, f"a T2 tool needs a delay in seconds, above 0 and at most "
                                           f"{MAX_APPROVAL_WAIT_S:.0f}")
        if not self.escalate_after_s < self.expire_after_s:
            raise _FieldProblem("escalate_after_s", "must be shorter than expire_after_s (escalate before expiry)")


def _invalid(error: ValidationError, tool: str | None, source: str) -> InvalidToolSpec:
    """The first problem of a pydantic error, as InvalidToolSpec naming the field."""
    first = error.errors()[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, _FieldProblem):
        return InvalidToolSpec(str(cause), tool=tool, field=cause.field, source=source)
    field = ".".join(str(part) for part in first["loc"]) or None
    # A ValueError of ours (a schema rule, the name's form) says it better than pydantic's wrapper.
    message = str(cause) if isinstance(cause, ValueError) else first["msg"]
    if first["type"] == "extra_forbidden":
        message = "is not a tool setting (misspelt?)"
    return InvalidToolSpec(message, tool=tool, field=field, source=source)


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without anchors and aliases: a registry needs none, and an alias lets a small file expand
    into a huge structure to walk."""

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in a tool registry",
                                              event.start_mark)
        return super().compose_node(parent, index)


def parse_tool_specs(text: str, source: str = "<tools>") -> dict[str, ToolSpec]:
    """The tools declared in registry text, by name; InvalidToolSpec for any problem."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_REGISTRY_BYTES:
        raise InvalidToolSpec(f"larger than {MAX_REGISTRY_BYTES} bytes", source=source)
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        raise InvalidToolSpec(f"not valid YAML: {error}", source=source) from None
    except RecursionError:
        raise InvalidToolSpec("nested too deeply", source=source) from None
    if not isinstance(data, Mapping) or set(data) != {"tools"}:
        raise InvalidToolSpec("must be a mapping with exactly one key, 'tools'", source=source)
    entries = data["tools"]
    if not isinstance(entries, list) or not entries:
        raise InvalidToolSpec("'tools' must be a non-empty list", source=source)
    if len(entries) > MAX_TOOLS:
        raise InvalidToolSpec(f"more than {MAX_TOOLS} tools", source=source)
    specs: dict[str, ToolSpec] = {}
    for position, entry in enumerate(entries, start=1):
        if not isinstance(entry, Mapping):
            raise InvalidToolSpec(f"tool #{position} must be a mapping", source=source)
        name = entry.get("name")
        tool = name if isinstance(name, str) and len(name) <= 128 else f"#{position}"
        try:
            spec = ToolSpec.model_validate(dict(entry))
        except ValidationError as error:
            raise _invalid(error, tool, source) from None
        except RecursionError:
            raise InvalidToolSpec("nested too deeply", tool=tool, source=source) from None
        if spec.name in specs:
            raise InvalidToolSpec("declared twice; tool names are unique", tool=spec.name, field="name",
                                  source=source)
        specs[spec.name] = spec
    return specs


def load_tool_specs(path: str | Path) -> dict[str, ToolSpec]:
    """The tool registry file at `path`, by tool name; InvalidToolSpec for any problem."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_REGISTRY_BYTES + 1)  # never reads more than the bound
    except OSError as error:
        raise InvalidToolSpec(f"cannot be read ({error.strerror or type(error).__name__})", source=str(path)) from None
    if len(raw) > MAX_REGISTRY_BYTES:
        raise InvalidToolSpec(f"larger than {MAX_REGISTRY_BYTES} bytes", source=str(path))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidToolSpec("is not UTF-8 text", source=str(path)) from None
    return parse_tool_specs(text, source=str(path))

