"""A user's request for an action, read from their own message (DESIGN.md §10): the rules
planner's way to turn "Propose 12% for 24 months." into a step that names the tool.

Only the user's message is read — never a document, a passage or a tool's reply — so nothing a
document says can add or call a tool; and a request becomes a step like any other, which the policy
engine decides just before it runs (a T2 call still waits for a person). Each tool's `intent`
(citadel/tools/spec.py) is a case-insensitive RE2 pattern, linear in the message, whose named groups
are arguments; `subject_arg` is filled from the case's subject when no group named it. Values take
the argument's schema type (an integer, a number, text); a request whose arguments then fail the
tool's schema is not proposed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from citadel import regex
from citadel.tools.schema import SchemaProblem
from citadel.tools.spec import ToolSpec, intent_pattern

# A subject becomes an identifier the way the example systems name records ("Acme Corp" → "acme-corp").
SUBJECT_SEPARATORS = regex.compile("tools.intents.subject_separators", r"[^a-z0-9_]+")
MAX_ACTIONS = 2  # requests one message may make


@dataclass(frozen=True)
class RequestedAction:
    tool: str
    args: dict[str, Any]
    span: tuple[int, int]  # where in the message the request is (not searched as a question)

    def ask(self, message: str) -> str:
        return " ".join(message[self.span[0]:self.span[1]].split())


def subject_id(subject: str) -> str:
    return SUBJECT_SEPARATORS.sub("-", subject.lower()).strip("-")


def _typed(value: str, declared: Mapping[str, Any]) -> Any:
    kind = declared.get("type") if isinstance(declared, Mapping) else None
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            number = float(value)
            return int(number) if number.is_integer() else number
    except ValueError:
        return value  # the schema check refuses it
    return value


class IntentMatcher:
    """The registered tools' intents, compiled once."""

    def __init__(self, specs: Iterable[ToolSpec]):
        self._intents = []
        for spec in specs:
            if spec.intent is None:
                continue
            try:
                self._intents.append((spec, intent_pattern(spec.intent.pattern)))
            except SchemaProblem:  # the spec's own check refuses such a pattern at load
                continue

    def __bool__(self) -> bool:
        return bool(self._intents)

    def find(self, message: str, subject: str | None, allowed: Iterable[str],
             check_args: Callable[[str, Mapping[str, Any]], None] | None = None) -> list[RequestedAction]:
        """The requests in `message` for tools in `allowed`, in message order, at most MAX_ACTIONS."""
        names = set(allowed)
        found: list[RequestedAction] = []
        for spec, pattern in self._intents:
            if spec.name not in names:
                continue
            match = pattern.search(message)
            if match is None:
                continue
            properties = spec.args_schema.get("properties", {})
            args = {name: _typed(value, properties.get(name, {}))
                    for name, value in match.groupdict().items() if value is not None}
            named = spec.intent.subject_arg
            if named and isinstance(args.get(named), str):
                args[named] = subject_id(args[named])  # "… for Acme" names the record as the subject would
            elif named and subject:
                args[named] = subject_id(subject)
            if check_args is not None:
                try:
                    check_args(spec.name, args)
                except Exception:  # noqa: BLE001 — any refusal: the request is not proposed
                    continue
            found.append(RequestedAction(spec.name, args, match.span()))
        return sorted(found, key=lambda a: a.span)[:MAX_ACTIONS]
