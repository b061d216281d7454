"""What the reviewer page shows of one pending task: the change as a diff of the
proposed arguments against the record as it stood when the run asked (the tool's `current_path`), two
lines of the run's evidence with their citations, the decisions the task takes, and the arguments a
reviewer may edit. Plain data; serving/http/routers/review/rendering.py renders it (and escapes every value)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from citadel.reviews.tasks import ReviewReason
from citadel.tools.approvals import Approval, TaskKind
from citadel.tools.spec import PATH_PLACEHOLDER, ToolSpec
from citadel.types import SECTION_PATH

NONE_SHOWN = "—"
EDITABLE_TYPES = ("number", "integer", "string")
MAX_SHOWN_CHARS = 200


def shown(value: Any) -> str:
    """A value as a reviewer reads it: text as is, numbers without noise, other JSON compact; bounded."""
    if value is None:
        return NONE_SHOWN
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "), ensure_ascii=False) \
        if not isinstance(value, (int, float)) else str(value)
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS - 1] + "…"


def diff_rows(proposed: Mapping[str, Any], current: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One row per proposed argument: its value in the current record (— when the record has no such
    field, or there is no record) against the proposal."""
    current = current or {}
    rows = []
    for field, value in proposed.items():
        before, after = shown(current.get(field)), shown(value)
        rows.append({"field": field, "current": before, "proposed": after, "changed": before != after})
    return rows


def editable_fields(approval: Approval, spec: ToolSpec | None) -> list[dict[str, Any]]:
    """The arguments a reviewer may change: those of a plain type, less the ones that name the record
    in the tool's path (another record would be another request)."""
    if spec is None or approval.kind is TaskKind.REVIEW and approval.reason != ReviewReason.ACTION_OUT_OF_SCOPE:
        return []
    properties = spec.args_schema.get("properties", {})
    fixed = (spec.http.placeholders() if spec.http is not None else set()) | spec_identifiers(spec)
    fields = []
    for field, value in approval.proposed_args.items():
        kind = properties.get(field, {}).get("type") if isinstance(properties.get(field), Mapping) else None
        if kind in EDITABLE_TYPES and field not in fixed:
            fields.append({"field": field, "type": kind, "value": value})
    return fields


def spec_identifiers(spec: ToolSpec) -> set[str]:
    """Arguments that name the record the call changes (the `current_path`'s placeholders)."""
    if spec.http is None or not spec.http.current_path:
        return set()
    return set(PATH_PLACEHOLDER.findall(spec.http.current_path))


REVIEW_TITLES = {"conflict_undated": "Versions disagree and no reliable date settles it",
                 "missing_reference": "The answer cited a reference that does not exist",
                 "invalid_tool_response": "A tool answered with something its schema refuses",
                 "action_out_of_scope": "An action outside the tool's policy",
                 "suspicious_content": "A document holds text addressed to AI assistants"}


def title_of(approval: Approval) -> str:
    if approval.kind is TaskKind.REVIEW:
        title = REVIEW_TITLES.get(approval.reason or "", f"A check failed ({approval.reason})")
        detail = str(approval.context.get("detail") or "")
        return f"{title}: {detail}" if detail else title
    subject = next((str(v) for k, v in approval.proposed_args.items() if k.endswith("_id")), "")
    return f"{approval.tool}{' for ' + subject if subject else ''}, requested by {approval.requester}"


def _section_link(url: Any) -> str | None:
    """The evidence line's link to its section, only when it is one of this deployment's section paths
    (what was recorded is shown as a link to nothing else)."""
    return url if isinstance(url, str) and url.startswith(SECTION_PATH.split("{", 1)[0]) else None


def review_item(approval: Approval, spec: ToolSpec | None, public: Mapping[str, Any]) -> dict[str, Any]:
    """The page's view of one task; `public` is what the API shows of it (no honeypot flag)."""
    context = approval.context or {}
    evidence = [{"quote": str(e.get("quote", "")), "citation": str(e.get("citation", "")),
                 "url": _section_link(e.get("url"))}
                for e in context.get("evidence", [])[:2] if isinstance(e, Mapping)]
    return {**public, "title": title_of(approval),
            "diff": diff_rows(approval.proposed_args, context.get("current")),
            "evidence": evidence, "editable": editable_fields(approval, spec)}
