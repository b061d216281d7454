"""The checks an answer must pass before it leaves, or go to a person (issue 16 item 5;
citadel/tools/reviews.py): no conflict between versions that reliable metadata cannot settle among
the documents it cites, and no citation of a reference that does not exist among its sources. Both
the run's synthesis and the single-shot answer ask the same question here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from citadel.agent.evidence import evidence_lines, resolved_conflicts
from citadel.catalog.base import DocumentRecord
from citadel.tools.reviews import FailedCheck, ReviewPolicy, ReviewReason
from citadel.types import Passage


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
