"""The checks an answer must pass before it leaves, or go to a person (see
citadel/reviews/tasks.py): no conflict between versions that reliable metadata cannot settle among
the documents it cites, and no citation of a reference that does not exist among its sources. Both
the run's synthesis and the single-shot answer ask the same question here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import hashlib
import time

from citadel.answer.conflicts import resolved_conflicts
from citadel.catalog.base import Catalog, DocumentRecord
from citadel.reviews.evidence import evidence_lines
from citadel.reviews.tasks import GO, SINGLE_SHOT_PREFIX, FailedCheck, ReviewPolicy, ReviewReason, Verdict, settle
from citadel.tools.approvals import ApprovalStore
from citadel.types import Passage, Principal

# A held single-shot answer's task is keyed by its asker and question (hashed: a question may hold
# what should not sit in an id), so asking again finds the same task, or its next round.
ANSWER_BASE = "answer"


def answer_check(question: str, passages: Sequence[Passage], cited: Iterable[str],
                 records: Mapping[str, DocumentRecord | None], invalid_markers: int, policy: ReviewPolicy,
                 today: str = "", conflicts: Sequence[Mapping[str, Any]] | None = None) -> FailedCheck | None:
    """The failed check a person must settle before this answer goes out, or None. `cited`: the
    document ids the answer cites; `conflicts`: already resolved (a run's), else found here."""
    cited_ids = set(cited)
    found = resolved_conflicts(passages, records, today) if conflicts is None else conflicts
    unsettled = [c for c in found if c.get("resolved_to") is None and set(c["document_ids"]) & cited_ids]
    if unsettled:
        conflict = unsettled[0]
        involved = [records.get(d) for d in conflict["document_ids"]]
        return FailedCheck(ReviewReason.CONFLICT_UNDATED, policy.document_reviewers(involved),
                           f"{conflict['detail']} No reliable effective date says which applies.",
                           evidence=evidence_lines([p for p in passages if p.document_id in conflict["document_ids"]],
                                                   question))
    if invalid_markers > 0:
        cited_records = [records.get(d) for d in sorted(cited_ids)]
        return FailedCheck(ReviewReason.MISSING_REFERENCE, policy.document_reviewers(cited_records),
                           f"The draft answer cited {invalid_markers} reference(s) that are not among its sources.",
                           evidence=evidence_lines([p for p in passages if p.document_id in cited_ids], question))
    return None


def single_shot_run_id(principal: Principal, question: str) -> str:
    digest = hashlib.sha256(question.strip().encode("utf-8")).hexdigest()[:32]
    return f"{SINGLE_SHOT_PREFIX}{principal.tenant_id}:{principal.user_id}:{digest}"


def single_shot_verdict(store: ApprovalStore, policy: ReviewPolicy, catalog: Catalog, principal: Principal,
                        question: str, response, today: str = "", clock=time.time,
                        run_id: str | None = None) -> Verdict:
    """Whether a single-shot answer (the answer service's response) goes out, waits for a review
    (`202 review_pending`), or was closed by one. Without a run (`run_id` None) there is nothing to
    resume: asking again runs every check again and finds the task as it stands; a run routed to the
    single-shot path parks and asks again when the task is decided."""
    if response.refused:
        return Verdict(GO)
    cited = [c["document_id"] for c in response.citations]
    ids = sorted({p.document_id for p in response.passages} | set(cited))
    records = {d: catalog.get_document(principal.tenant_id, d) for d in ids}
    failed = answer_check(question, response.passages, cited, records, response.invalid_markers, policy, today)
    return settle(store, failed, tenant_id=principal.tenant_id,
                  run_id=run_id or single_shot_run_id(principal, question),
                  base=ANSWER_BASE, requester=principal.user_id, now=clock(), expire_after_s=policy.expire_after_s)
