"""`citadel eval router`: which path messages take, over a labeled set.

Each line of the set (default `tests/regression/router/messages.jsonl`) is a message, its `label`
(single_question, multi_part, bare_action, question_plus_action, chit_chat) and the `path` a run
should take: single_shot, agentic, or refused (the router's fixed reply, which a run delivers on the
single-shot path). Every message is routed the way a run routes it (citadel/agent/routing.py): the
production router, then the registered tools' intents read from the message (the example CRM's
registry by default), the case's subject being the first name in the message. No model, no index.

The report is the confusion table (label × path) and the accuracy: the share of messages whose path is
the expected one.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from citadel.agent.criteria import first_name
from citadel.agent.routing import AGENTIC, REFUSED, SINGLE_SHOT, reported_path
from citadel.guardrails.base import QuestionRouter
from citadel.tools.intents import IntentMatcher
from citadel.tools.schema import validator_for
from citadel.tools.spec import ToolSpec, load_tool_specs

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SET = REPO / "tests" / "regression" / "router" / "messages.jsonl"
DEFAULT_REGISTRY = REPO / "examples" / "crm" / "tools.yaml"
LABELS = ("single_question", "multi_part", "bare_action", "question_plus_action", "chit_chat")
PATHS = (SINGLE_SHOT, AGENTIC, REFUSED)


@dataclass(frozen=True)
class Item:
    message: str
    label: str
    path: str


def load_set(path: Path = DEFAULT_SET) -> list[Item]:
    """The labeled messages; ValueError naming the line for an unknown label or path."""
    items = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        raw = json.loads(line)
        item = Item(str(raw["message"]), raw["label"], raw["path"])
        if item.label not in LABELS or item.path not in PATHS:
            raise ValueError(f"{path}:{number}: label must be one of {LABELS} and path one of {PATHS}")
        items.append(item)
    return items


def intent_matcher(specs: Mapping[str, ToolSpec]) -> IntentMatcher:
    return IntentMatcher(specs.values())


def _schema_check(specs: Mapping[str, ToolSpec]):
    """Arguments checked against the tool's schema, as the registry's tools check them in a run."""
    validators = {name: validator_for(spec.args_schema) for name, spec in specs.items()}

    def check(name: str, args: Mapping[str, Any]) -> None:
        validators[name].validate(dict(args))
    return check


def route_all(items: list[Item], router: QuestionRouter, specs: Mapping[str, ToolSpec]) -> list[str]:
    """The path each message takes."""
    matcher, check = intent_matcher(specs), _schema_check(specs)

    def path_of(message: str) -> str:
        actions = lambda: matcher.find(message, first_name(message), specs, check)  # noqa: E731
        return reported_path(router.route(message), actions)
    return [path_of(item.message) for item in items]


def report(items: list[Item], paths: list[str]) -> dict[str, Any]:
    """Accuracy, the table (label → path → count) and the misses."""
    table = {label: {path: 0 for path in PATHS} for label in LABELS}
    for item, path in zip(items, paths):
        table[item.label][path] += 1
    right = sum(item.path == path for item, path in zip(items, paths))
    by_label = Counter(item.label for item in items)
    return {"items": len(items), "accuracy": right / len(items) if items else 0.0,
            "table": {label: row for label, row in table.items() if by_label[label]},
            "misses": [{"message": i.message, "label": i.label, "expected": i.path, "got": p}
                       for i, p in zip(items, paths) if i.path != p]}


def run(set_path: Path = DEFAULT_SET, registry: Path | None = DEFAULT_REGISTRY,
        router: QuestionRouter | None = None) -> dict[str, Any]:
    """Route the set with the production router (or `router`) and the registry's intents."""
    if router is None:
        from citadel.guardrails.router import Router
        router = Router()
    items = load_set(set_path)
    specs = load_tool_specs(registry) if registry is not None else {}
    return report(items, route_all(items, router, specs))


def format_table(result: Mapping[str, Any]) -> str:
    """The confusion table as aligned text, then the accuracy."""
    width = max(len(label) for label in result["table"]) + 2
    lines = ["label".ljust(width) + "".join(p.rjust(13) for p in PATHS)]
    lines += [label.ljust(width) + "".join(str(row[p]).rjust(13) for p in PATHS)
              for label, row in result["table"].items()]
    lines.append(f"accuracy {result['accuracy']:.3f} over {result['items']} messages")
    return "\n".join(lines)
