"""Review tasks for failed checks (DESIGN.md §10).

Some checks fail in a way only a person can settle: two versions of a document disagree and no
reliable effective date says which applies; the answer cites a reference that does not exist; a tool
answers with something its response schema refuses; an action asks for more than the tool's policy
allows. Then nothing goes out: the answer (or the action) is held, the user is told honestly
(`202 review_pending`, or a `review_pending` event on a run), and a review task goes to the people who
can fix the cause — the document's owner, or the tool's approver group.

A review task is an `Approval` of kind REVIEW in the same store (citadel/tools/approvals.py), with
the same lifecycle: pending, decided once, expiring after `tools.review_expire_after_s` (silence never
corrects anything). The reviewer answers one of three ways:

- **correct**: the source is fixed (a date set in the catalog, a document re-published, the tool's
  system repaired) or, for an action, its arguments are edited. The held request then runs every
  check again; one that still fails opens the next round, up to MAX_REVIEW_ROUNDS, after which the
  answer goes out with the failure reported as before (an unresolved conflict is named in the answer)
  or the action is not done.
- **request_info**: the answer or action is not given; the user is told what the reviewer asked.
- **reject**: the same, with the reviewer's comment.

Rounds are separate tasks keyed `<base>#review<n>` under the request's run id, so a resumed run asks
for the same task again and a later round is a new task.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from citadel.catalog.base import DocumentRecord
from citadel.guardrails.planted import SCREENED_NOTICE
from citadel.tools.approvals import Approval, ApprovalStatus, ApprovalStore, TaskKind
from citadel.tools.spec import ToolSpec

log = logging.getLogger(__name__)

# The `tool` a review about an answer names (no tool is involved).
ANSWER = "answer"
MAX_REVIEW_ROUNDS = 3
MAX_DETAIL_CHARS = 1_000
# The run id of a single-shot answer's review: there is no run, the request is asked again.
SINGLE_SHOT_PREFIX = "answer:"
# The run id of a document's suspicious-content task: no request waits on it (the source was not used).
CONTENT_PREFIX = "content:"


class ReviewReason(StrEnum):
    CONFLICT_UNDATED = "conflict_undated"
    MISSING_REFERENCE = "missing_reference"
    INVALID_TOOL_RESPONSE = "invalid_tool_response"
    ACTION_OUT_OF_SCOPE = "action_out_of_scope"
    SUSPICIOUS_CONTENT = "suspicious_content"  # a source holds text addressed to AI assistants


# What the user is told while a task is open: honest, and naming nothing the user may not read.
HELD_MESSAGES = {
    ReviewReason.CONFLICT_UNDATED: "The documents disagree and none of them says which version is in force, so "
                                   "the answer is held for a review by the documents' owner.",
    ReviewReason.MISSING_REFERENCE: "The answer cited a reference that does not exist among its sources, so it is "
                                    "held for a review.",
    ReviewReason.INVALID_TOOL_RESPONSE: "A system the assistant used answered with something it could not check, so "
                                        "the request is held for a review by the people who look after it.",
    ReviewReason.ACTION_OUT_OF_SCOPE: "The action asked for is outside what the assistant may do on its own, so it "
                                      "is held for a review by the people who may approve it.",
    ReviewReason.SUSPICIOUS_CONTENT: SCREENED_NOTICE,
}
# What the user is told when the reviewer did not correct it.
CLOSED_MESSAGES = {
    ApprovalStatus.REJECTED: "A reviewer rejected it",
    ApprovalStatus.INFO_REQUESTED: "A reviewer asked for more information",
    ApprovalStatus.EXPIRED: "No reviewer answered in time, so it was not given",
}


@dataclass(frozen=True)
class FailedCheck:
    """A check a person must settle: why, who reviews it, what failed (for the reviewer), and for an
    action its tool and arguments (a correction edits them)."""

    reason: ReviewReason
    reviewers: str
    detail: str
    tool: str = ANSWER
    args: Mapping[str, Any] = field(default_factory=dict)
    evidence: Sequence[Mapping[str, str]] = ()

    @property
    def message(self) -> str:
        return HELD_MESSAGES[self.reason]


@dataclass(frozen=True)
class ReviewPolicy:
    """Who reviews what, and for how long a task waits (`tools.review_group`, `review_expire_after_s`)."""

    fallback_group: str = "knowledge-owners"
    expire_after_s: float | None = 7 * 86_400.0

    @classmethod
    def from_config(cls, tools) -> "ReviewPolicy":
        return cls(tools.review_group, tools.review_expire_after_s)

    def tool_reviewers(self, spec: ToolSpec | None) -> str:
        """A tool's approver group (its lead group for a tool with none), else the fallback group."""
        if spec is not None and (spec.approver_group or spec.lead_group):
            return spec.approver_group or spec.lead_group
        return self.fallback_group

    def document_reviewers(self, records: Sequence[DocumentRecord | None]) -> str:
        """The first document's owner (a group or a user: citadel/tools/approvals.py `deciders`), else
        the fallback group."""
        return next((r.owner for r in records if r is not None and r.owner), self.fallback_group)


def review_key(base: str, round_: int) -> str:
    return f"{base}#review{round_}"


def latest_review(store: ApprovalStore, run_id: str, base: str) -> tuple[int, Approval | None]:
    """The latest round's task for this request (round 0 and None when none was asked for)."""
    latest, count = None, 0
    for round_ in range(1, MAX_REVIEW_ROUNDS + 1):
        found = store.for_step(run_id, review_key(base, round_))
        if found is None:
            break
        latest, count = found, round_
    return count, latest


def request_review(store: ApprovalStore, failed: FailedCheck, *, tenant_id: str, run_id: str, base: str,
                   round_: int, requester: str, now: float, expire_after_s: float | None) -> Approval:
    """The task for this round (the stored one when a resumed request asks again)."""
    return store.request(Approval(
        "", tenant_id, run_id, review_key(base, round_), failed.tool, requester, dict(failed.args),
        failed.reviewers, None, None, now + expire_after_s if expire_after_s else None,
        kind=TaskKind.REVIEW, reason=str(failed.reason),
        context={"message": failed.message, "detail": failed.detail[:MAX_DETAIL_CHARS],
                 "evidence": [dict(e) for e in list(failed.evidence)[:2]]}))


@dataclass(frozen=True)
class Verdict:
    """What to do with a request whose checks ran: `go` (deliver), `hold` (the pending `task`), or
    `closed` (the reviewer did not correct it: `task` says how)."""

    action: str
    task: Approval | None = None

    @property
    def closed_message(self) -> str:
        task = self.task
        said = f": {task.comment}" if task is not None and task.comment else "."
        return f"{CLOSED_MESSAGES.get(task.status, 'It was not given') if task else 'It was not given'}{said}"


GO, HOLD, CLOSED = "go", "hold", "closed"
REVIEW_PENDING = "review_pending"


def settle(store: ApprovalStore, failed: FailedCheck | None, *, tenant_id: str, run_id: str, base: str,
           requester: str, now: float, expire_after_s: float | None) -> Verdict:
    """A request's checks ran (`failed`: the one a person must settle, or None). Checks that pass
    let it go. A failing one holds it while its task is pending; after a correction the checks ran
    again, and a failure opens the next round; a rejection, a request for information or an expiry
    closes it; with the rounds spent, it goes out (the failure reported as without a review)."""
    if failed is None:
        return Verdict(GO)
    round_, latest = latest_review(store, run_id, base)
    if latest is not None and latest.status is ApprovalStatus.PENDING:
        return Verdict(HOLD, latest)
    if latest is not None and latest.status is not ApprovalStatus.APPROVED:
        return Verdict(CLOSED, latest)
    if round_ >= MAX_REVIEW_ROUNDS:
        return Verdict(GO, latest)
    return Verdict(HOLD, request_review(store, failed, tenant_id=tenant_id, run_id=run_id, base=base,
                                        round_=round_ + 1, requester=requester, now=now,
                                        expire_after_s=expire_after_s))


def held_body(task: Approval, message: str) -> dict[str, Any]:
    """The `202 review_pending` body (and the `review_pending` event's data)."""
    return {"status": REVIEW_PENDING, "review_id": task.approval_id, "reason": task.reason, "message": message,
            "reviewers": task.approver_group, "expire_at": task.expire_at}


@dataclass(frozen=True)
class FlaggedSource:
    """A source the screen dropped, as its owner's task names it (a Passage has these fields too)."""

    document_id: str
    version: int
    chunk_id: str


def has_run(task: Approval) -> bool:
    """Whether a run waits on the task (a held single-shot answer or a flagged document has none)."""
    return not task.run_id.startswith((SINGLE_SHOT_PREFIX, CONTENT_PREFIX))


class SuspiciousContentReporter:
    """Tells a document's owner, once per document version, that a source the screen dropped holds text
    addressed to AI assistants (citadel/guardrails/planted.py). Nothing waits on the task: the passage
    was not used; the owner fixes or withdraws the document. The store's `request` is idempotent on
    (run id, step id) = (`content:<document>`, `v<version>`), so processes and restarts agree on
    "once"; the ones this process already reported are remembered so a hot document costs no store call."""

    MAX_REMEMBERED = 10_000

    def __init__(self, store: ApprovalStore, catalog, policy: ReviewPolicy, clock):
        self.store = store
        self.catalog = catalog
        self.policy = policy
        self.clock = clock
        self._reported: set[tuple[str, str, int]] = set()

    def __call__(self, tenant_id: str, dropped: Sequence[Any]) -> None:
        """`dropped`: passages (document_id, version, chunk_id) the screen removed for `tenant_id`."""
        for passage in dropped:
            key = (tenant_id, passage.document_id, int(passage.version))
            if key in self._reported:
                continue
            try:
                self._report(tenant_id, passage)
            except Exception:  # never fails the answer or run that found it; a later read tells the owner
                log.exception("telling the owner of %s v%s about its screened text failed", passage.document_id,
                              passage.version)
                continue
            if len(self._reported) >= self.MAX_REMEMBERED:
                self._reported.clear()
            self._reported.add(key)

    def _report(self, tenant_id: str, passage: Any) -> None:
        record = self.catalog.get_document(tenant_id, passage.document_id)
        now = float(self.clock())
        expire_after_s = self.policy.expire_after_s
        self.store.request(Approval(
            "", tenant_id, f"{CONTENT_PREFIX}{passage.document_id}", f"v{passage.version}", ANSWER, "citadel", {},
            self.policy.document_reviewers([record]), None, None, now + expire_after_s if expire_after_s else None,
            kind=TaskKind.REVIEW, reason=str(ReviewReason.SUSPICIOUS_CONTENT),
            context={"message": HELD_MESSAGES[ReviewReason.SUSPICIOUS_CONTENT],
                     "detail": f"{passage.document_id} v{passage.version} holds text addressed to AI assistants "
                               f"(chunk {passage.chunk_id}); it is left out of every answer until it is fixed",
                     "document_id": passage.document_id, "version": int(passage.version),
                     "chunk_id": passage.chunk_id}))
