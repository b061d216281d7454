"""Feedback and reviewers' edits become test items (DESIGN.md §11).

Two things people already do say that an answer or an action was wrong, and each is worth a labeled
test item once someone who knows the documents has said what was right:
- a thumbs-down with a reason on an answer (`POST /v1/answers/{id}/feedback`) queues an *answer item*:
  the question, the answer given, the sources (document, version) it cited, the reason and comment;
- a reviewer's edit_and_approve or reject of a tool call queues a *tool item*: the tool, the proposed
  arguments, the final ones (None: rejected) and the reviewer's reason.

Items wait in the catalog (`eval_candidates`) per tenant and per source — `answer_feedback`, or
`tool:<name>` for each tool, never one mixed file — until an owner promotes one with a label or
dismisses it (the admin routes, serving/services/candidates.py). A label says, for an answer item,
`answer` or `refuse`, the expected documents and optionally the facts the answer must hold; for a tool
item, the right final arguments or `reject`. `export` writes the promoted answer items in the format of
tests/regression/rag_set.jsonl (they load with `citadel.eval.rag.load_set`) and the tool items as one
JSONL file per tool.

What an item keeps: the question and answer come from the answer log, where personal data is already
masked (a question withheld there for sensitive data queues nothing: there is no question to test);
the comment and the reviewer's reason are masked here the same way (`PersonalDataMasker`) and
redacted when they hold a card number or a secret. The user who voted is not in the item (the
feedback row keeps them), nor is the reviewer (the approval record keeps them). Every text is cut to
a bound, and each tenant's source holds at most `max_pending` pending items: past it, a new item is
dropped with a warning, so a flood of votes cannot grow the queue without end.

Idempotent: an item's origin (`answer:<answer id>`, `approval:<approval id>`) is its key within the
tenant and source, so the same vote or decision is queued once (a second vote on the same answer adds
a feedback row, not a second item).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from citadel.catalog.base import (CANDIDATE_DISMISSED, CANDIDATE_PENDING, CANDIDATE_PROMOTED, CANDIDATES_READ_LIMIT,
                                  WITHHELD_QUESTION, Catalog, PermissionSource)
from citadel.errors import Conflict, InvalidRequest, NotFound
from citadel.guardrails.personal import PATTERNS_ONLY, PersonalDataMasker
from citadel.guardrails.redaction import redacted_text
from citadel.reviews.tasks import ANSWER
from citadel.tools.approvals import Approval, ApprovalStatus, encode_args
from citadel.tools.spec import TOOL_NAME_PATTERN

log = logging.getLogger(__name__)

ANSWER_FEEDBACK = "answer_feedback"
TOOL_SOURCE_PREFIX = "tool:"
STATUSES = (CANDIDATE_PENDING, CANDIDATE_PROMOTED, CANDIDATE_DISMISSED)
# Pending items one tenant's source may hold; past it new ones are dropped (and logged).
MAX_PENDING = 5_000
# Bounds on what an item keeps (texts are cut, lists shortened) and on an owner's label.
MAX_QUESTION_CHARS = 4_000
MAX_ANSWER_CHARS = 16_000
MAX_COMMENT_CHARS = 2_000
MAX_SOURCES = 50
MAX_LABEL_ITEMS = 50
MAX_FACT_CHARS = 500
MAX_NAME_CHARS = 256
CUT = " [cut]"
# The labeled sets' principal: the set names the user (citadel/eval/rag.py's default) and the groups.
EXPORT_USER = "eval-user"
DEFAULT_CATEGORY = "feedback"
# The labeled regression set's vocabulary: what an item expects, and the splits. Candidates are written
# in it; the eval harness (citadel/eval/rag.py) reads the sets it labels with it.
EXPECTATIONS = ("answer", "refuse")
SPLITS = ("", "dev", "test")
TOOL_EXPECTATIONS = ("approve", "reject")
ANSWER_LABEL_KEYS = frozenset({"expect", "expected_documents", "expected_answer", "expected_heading",
                               "expected_reason", "must_not_cite_documents", "groups", "category", "split"})
TOOL_LABEL_KEYS = frozenset({"expect", "final_args"})


def tool_source(tool: str) -> str:
    return TOOL_SOURCE_PREFIX + tool


def valid_source(source: str) -> bool:
    """`answer_feedback` or `tool:<a registry tool name>`."""
    if source == ANSWER_FEEDBACK:
        return True
    return source.startswith(TOOL_SOURCE_PREFIX) and \
        TOOL_NAME_PATTERN.fullmatch(source[len(TOOL_SOURCE_PREFIX):]) is not None


@dataclass
class ExportReport:
    answers: int = 0
    tools: dict[str, int] = field(default_factory=dict)


class CandidateQueue:
    def __init__(self, catalog: Catalog, masker: PersonalDataMasker = PATTERNS_ONLY, max_pending: int = MAX_PENDING):
        """`masker`: the process's personal-data masker (the answer log's, `Wiring.personal_data`)."""
        self.catalog = catalog
        self.masker = masker
        self.max_pending = max_pending

    # ------------------------------------------------------------------ queueing
    def add_feedback(self, tenant_id: str, answer_id: str, entry: Mapping[str, Any], reason: str,
                     comment: str) -> int | None:
        """Queue a thumbs-down (with its reason) on the answer-log row `entry`; its id, or None when
        nothing was queued (a withheld question, a full queue)."""
        if entry["question"] == WITHHELD_QUESTION:
            return None
        response = entry.get("response") or {}
        item = {"question": self._kept(entry["question"], MAX_QUESTION_CHARS),
                "answer": self._kept(str(response.get("answer") or ""), MAX_ANSWER_CHARS),
                "outcome": response.get("outcome"), "bundle_id": response.get("bundle_id"),
                "sources": cited_sources(response), "reason": reason,
                "comment": self._kept(comment, MAX_COMMENT_CHARS)}
        return self._queue(tenant_id, ANSWER_FEEDBACK, f"answer:{answer_id}", item)

    def add_decision(self, decided: Approval, decision: str) -> int | None:
        """Queue a reviewer's edit (final arguments that differ from the proposed) or rejection of a
        real tool call; None for anything else: an approval as proposed, a honeypot (a test of the
        reviewer, not of the tool), a held answer's review (no arguments), an expiry (no decision)."""
        if decided.honeypot or decided.tool == ANSWER or decided.decided_by is None:
            return None
        if decided.status is ApprovalStatus.APPROVED and decided.final_args == decided.proposed_args:
            return None
        if decided.status not in (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED):
            return None
        if TOOL_NAME_PATTERN.fullmatch(decided.tool) is None:  # the source names an export file
            log.warning("no candidate for approval %s: tool name %r", decided.approval_id, decided.tool[:80])
            return None
        item = {"tool": decided.tool, "approval_id": decided.approval_id, "task": str(decided.kind),
                "decision": decision, "proposed_args": decided.proposed_args, "final_args": decided.final_args,
                "reason": self._kept(decided.comment, MAX_COMMENT_CHARS)}
        return self._queue(decided.tenant_id, tool_source(decided.tool), f"approval:{decided.approval_id}", item)

    def _queue(self, tenant_id: str, source: str, origin: str, item: dict[str, Any]) -> int | None:
        candidate_id = self.catalog.queue_candidate(tenant_id, source, origin, item, self.max_pending)
        if candidate_id is None:
            log.warning("candidate queue of %s/%s is full (%d pending): %s not queued", tenant_id, source,
                        self.max_pending, origin)
        return candidate_id

    def _kept(self, text: str, most: int) -> str:
        """A text as an item keeps it: personal data masked, a card number or secret redacted, bounded."""
        text = redacted_text(self.masker.mask(text))
        return text if len(text) <= most else text[: most - len(CUT)] + CUT

    # ------------------------------------------------------------------ an owner's decisions
    def list(self, tenant_id: str, source: str | None = None, status: str | None = CANDIDATE_PENDING,
             limit: int = CANDIDATES_READ_LIMIT, after_id: int = 0) -> list[dict[str, Any]]:
        """The oldest `limit` candidates with an id above `after_id` (the last id of the page before)."""
        if source is not None and not valid_source(source):
            raise InvalidRequest(f"source is {ANSWER_FEEDBACK!r} or '{TOOL_SOURCE_PREFIX}<tool name>'")
        if status is not None and status not in STATUSES:
            raise InvalidRequest(f"status is one of {list(STATUSES)}")
        return self.catalog.candidates(tenant_id, source, status, limit=min(limit, CANDIDATES_READ_LIMIT),
                                       after_id=after_id)

    def get(self, candidate_id: int) -> dict[str, Any] | None:
        return self.catalog.candidate(candidate_id)

    def promote(self, candidate: Mapping[str, Any], label: Mapping[str, Any], actor: str) -> dict[str, Any]:
        """`candidate` (a row `get` returned) promoted with the owner's label, checked first (422)."""
        if candidate["source"] == ANSWER_FEEDBACK:
            checked = answer_label(label, self.catalog, candidate["tenant_id"])
        else:
            checked = tool_label(label)
        return self._decide(candidate, CANDIDATE_PROMOTED, checked, actor)

    def dismiss(self, candidate: Mapping[str, Any], actor: str) -> dict[str, Any]:
        return self._decide(candidate, CANDIDATE_DISMISSED, None, actor)

    def _decide(self, candidate: Mapping[str, Any], status: str, label: dict[str, Any] | None,
                actor: str) -> dict[str, Any]:
        decided = self.catalog.decide_candidate(candidate["id"], status, label, actor)
        if decided is None:
            now = self.catalog.candidate(candidate["id"])
            if now is None:
                raise NotFound(f"no candidate {candidate['id']}")
            raise Conflict(f"candidate {candidate['id']} is {now['status']} already", code="candidate_decided")
        return decided

    # ------------------------------------------------------------------ export
    def promoted(self, tenant_id: str, source: str | None = None) -> Iterator[dict[str, Any]]:
        """Every promoted candidate of the tenant (of one source), oldest first, a page at a time."""
        after = 0
        while True:
            page = self.catalog.candidates(tenant_id, source, CANDIDATE_PROMOTED, limit=CANDIDATES_READ_LIMIT,
                                           after_id=after)
            yield from page
            if len(page) < CANDIDATES_READ_LIMIT:
                return
            after = page[-1]["id"]

    def export(self, tenant_id: str, answers_path: Path, tools_dir: Path) -> ExportReport:
        """Write the tenant's promoted answer items to `answers_path` (the regression set's JSONL; an
        empty file when there are none) and its promoted tool items to `<tools_dir>/<tool>.jsonl`."""
        report = ExportReport()
        tool_files: dict[str, Any] = {}
        answers_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with answers_path.open("w", encoding="utf-8") as answers:
                for candidate in self.promoted(tenant_id):
                    if candidate["source"] == ANSWER_FEEDBACK:
                        answers.write(_line(rag_record(candidate)))
                        report.answers += 1
                        continue
                    tool = candidate["item"]["tool"]
                    if tool not in tool_files:
                        tools_dir.mkdir(parents=True, exist_ok=True)
                        tool_files[tool] = (tools_dir / f"{tool}.jsonl").open("w", encoding="utf-8")
                    tool_files[tool].write(_line(tool_record(candidate)))
                    report.tools[tool] = report.tools.get(tool, 0) + 1
        finally:
            for handle in tool_files.values():
                handle.close()
        return report


# ---------------------------------------------------------------------- items and labels
def cited_sources(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The sources an answer cited, each once: document and version (what a "wrong source" vote is
    about after a new version is published), with the heading and chunk that were cited."""
    sources: list[dict[str, Any]] = []
    seen: set[tuple[str, Any]] = set()
    for citation in response.get("citations") or ():
        key = (citation.get("document_id"), citation.get("version"))
        if key in seen or not isinstance(key[0], str):
            continue
        seen.add(key)
        sources.append({"document_id": key[0][:MAX_NAME_CHARS], "version": key[1],
                        "heading": str(citation.get("heading") or "")[:MAX_NAME_CHARS],
                        "chunk_id": str(citation.get("chunk_id") or "")[:MAX_NAME_CHARS]})
        if len(sources) == MAX_SOURCES:
            break
    return sources


def answer_label(label: Mapping[str, Any], catalog: PermissionSource, tenant_id: str) -> dict[str, Any]:
    """An owner's label of an answer item, checked: `expect` answer | refuse; `expected_documents`
    (the tenant's documents; at least one for an answer); optional `expected_answer` facts ("a|b":
    either), `expected_heading`, `expected_reason`, `must_not_cite_documents`, `category`, `split`,
    and `groups` — the groups the set's principal asks with; by default those the expected documents
    are shared with, so the item's user may read them."""
    _known_keys(label, ANSWER_LABEL_KEYS)
    expect = label.get("expect")
    if expect not in EXPECTATIONS:
        raise InvalidRequest(f"expect is one of {list(EXPECTATIONS)}")
    documents = _names(label.get("expected_documents"), "expected_documents")
    if expect == "answer" and not documents:
        raise InvalidRequest("an item expecting an answer names its expected_documents")
    records = {d: catalog.get_document(tenant_id, d) for d in documents}
    unknown = sorted(d for d, record in records.items() if record is None)
    if unknown:
        raise InvalidRequest(f"no document {unknown[0]!r} in tenant {tenant_id!r}")
    groups = label.get("groups")
    checked: dict[str, Any] = {
        "expect": expect, "expected_documents": documents,
        "groups": _names(groups, "groups") if groups is not None
        else sorted({g for r in records.values() if r is not None and r.visibility != "tenant" for g in r.groups}),
        "category": _name(label.get("category") or DEFAULT_CATEGORY, "category")}
    facts = _texts(label.get("expected_answer"), "expected_answer")
    if facts:
        checked["expected_answer"] = facts
    not_cited = _names(label.get("must_not_cite_documents"), "must_not_cite_documents")
    if not_cited:
        checked["must_not_cite_documents"] = not_cited
    for key in ("expected_heading", "expected_reason"):
        if label.get(key):
            checked[key] = _name(label[key], key)
    split = label.get("split") or ""
    if split not in SPLITS:
        raise InvalidRequest(f"split is one of {list(SPLITS)}")
    if split:
        checked["split"] = split
    return checked


def tool_label(label: Mapping[str, Any]) -> dict[str, Any]:
    """An owner's label of a tool item: `expect` approve with the right `final_args`, or reject."""
    _known_keys(label, TOOL_LABEL_KEYS)
    expect = label.get("expect")
    if expect not in TOOL_EXPECTATIONS:
        raise InvalidRequest(f"expect is one of {list(TOOL_EXPECTATIONS)}")
    final = label.get("final_args")
    if expect == "reject":
        if final is not None:
            raise InvalidRequest("a rejection takes no final_args")
        return {"expect": expect, "final_args": None}
    encode_args(final, "final_args")  # a JSON object within the policy engine's bound
    return {"expect": expect, "final_args": dict(final)}


def rag_record(candidate: Mapping[str, Any]) -> dict[str, Any]:
    """A promoted answer item as a line of the labeled regression set (citadel/eval/rag.py `load_set`)."""
    label = candidate["label"]
    record = {"id": f"candidate-{candidate['tenant_id']}-{candidate['id']}", "category": label["category"],
              "tenant": candidate["tenant_id"], "user": EXPORT_USER, "groups": label["groups"],
              "question": candidate["item"]["question"], "expect": label["expect"],
              "expected_documents": label["expected_documents"]}
    for key in ("expected_heading", "expected_reason", "must_not_cite_documents", "expected_answer", "split"):
        if label.get(key):
            record[key] = label[key]
    return record


def tool_record(candidate: Mapping[str, Any]) -> dict[str, Any]:
    """A promoted tool item: what was proposed and what the owner says the call should have been."""
    item, label = candidate["item"], candidate["label"]
    return {"id": f"candidate-{candidate['tenant_id']}-{candidate['id']}", "tenant": candidate["tenant_id"],
            "tool": item["tool"], "proposed_args": item["proposed_args"], "expect": label["expect"],
            "final_args": label["final_args"], "reviewer_decision": item["decision"], "reason": item["reason"]}


def _line(record: Mapping[str, Any]) -> str:
    return json.dumps(record, allow_nan=False) + "\n"


def _known_keys(label: Mapping[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(label) - allowed)
    if unknown:
        raise InvalidRequest(f"unknown label field {unknown[0]!r}; a label holds {sorted(allowed)}")


def _name(value: object, field_name: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_CHARS or not value.isprintable():
        raise InvalidRequest(f"{field_name} is 1 to {MAX_NAME_CHARS} printable characters")
    return value


def _list(value: object, field_name: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_LABEL_ITEMS:
        raise InvalidRequest(f"{field_name} is a list of at most {MAX_LABEL_ITEMS} entries")
    return value


def _names(value: object, field_name: str) -> list[str]:
    return sorted({_name(v, field_name) for v in _list(value, field_name)})


def _texts(value: object, field_name: str) -> list[str]:
    texts = _list(value, field_name)
    if any(not isinstance(t, str) or not 0 < len(t) <= MAX_FACT_CHARS for t in texts):
        raise InvalidRequest(f"{field_name} holds texts of 1 to {MAX_FACT_CHARS} characters")
    return list(texts)
