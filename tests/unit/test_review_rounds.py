"""Review tasks' rounds (citadel/reviews/tasks.py) and the answer checks that open them
(citadel/reviews/checks.py), on the in-process approvals store."""

from __future__ import annotations

import pytest

from citadel.catalog.base import DocumentRecord
from citadel.reviews.checks import answer_check
from citadel.reviews.tasks import CLOSED, GO, HOLD, MAX_REVIEW_ROUNDS, FailedCheck, ReviewPolicy, ReviewReason, settle
from citadel.tools.approvals import ApprovalStatus, MemoryApprovalStore
from citadel.types import Passage

FAILED = FailedCheck(ReviewReason.MISSING_REFERENCE, "owners", "cited [7] of 3 sources")


@pytest.fixture
def store():
    return MemoryApprovalStore(lambda: 1_000.0)


def verdict(store, failed=FAILED):
    return settle(store, failed, tenant_id="acme", run_id="run-1", base="answer", requester="alice", now=1_000.0,
                  expire_after_s=60.0)


def test_a_failed_check_holds_once_per_round_and_checks_that_pass_let_it_go(store):
    first = verdict(store)
    assert first.action == HOLD and first.task.kind == "review" and first.task.approver_group == "owners"
    assert first.task.expire_at == 1_060.0 and first.task.requester == "alice"
    assert verdict(store).task.approval_id == first.task.approval_id  # asked again: the same task
    assert verdict(store, None).action == GO  # the checks pass: nothing held, whatever is pending


def test_a_correction_opens_the_next_round_until_the_rounds_are_spent(store):
    seen = []
    for _ in range(MAX_REVIEW_ROUNDS):
        held = verdict(store)
        assert held.action == HOLD and held.task.approval_id not in seen
        seen.append(held.task.approval_id)
        store.decide(held.task.approval_id, ApprovalStatus.APPROVED, "olga", None)
    assert verdict(store).action == GO  # the failure goes out reported, as without reviews


@pytest.mark.parametrize("status, said", [(ApprovalStatus.REJECTED, "A reviewer rejected it: no"),
                                          (ApprovalStatus.INFO_REQUESTED, "A reviewer asked for more information: no")])
def test_a_rejection_or_a_request_for_information_closes_it_with_the_reviewers_word(store, status, said):
    held = verdict(store)
    store.decide(held.task.approval_id, status, "olga", None, "no")
    closed = verdict(store)
    assert closed.action == CLOSED and closed.closed_message == said


def record(document_id: str, title: str, effective_date: str | None, owner: str = "finance-ops") -> DocumentRecord:
    return DocumentRecord("acme", document_id, title, f"{document_id}.md", owner, "groups", effective_date, None,
                          "published", 1, 1, 1, ("staff",))


def passage(document_id: str, title: str, text: str) -> Passage:
    return Passage(f"acme:{document_id}:v1:0000", text, document_id, title, 1, f"{title} > Meals", None,
                   f"{document_id}.md", 0.9)


PASSAGES = [passage("meals", "Meal Policy", "The allowance is 55 euros."),
            passage("meals-2024", "Meal Policy 2024", "The allowance is 40 euros.")]


def test_editions_that_no_date_orders_go_to_the_owner_and_dated_ones_do_not():
    undated = {"meals": record("meals", "Meal Policy", None), "meals-2024": record("meals-2024", "Meal Policy 2024",
                                                                                   "2024-01-01")}
    failed = answer_check("meal allowance", PASSAGES, ["meals"], undated, 0, ReviewPolicy(), today="2026-12-02")
    assert failed.reason == ReviewReason.CONFLICT_UNDATED and failed.reviewers == "finance-ops"
    assert "no effective date" in failed.detail and len(failed.evidence) == 2
    dated = {**undated, "meals": record("meals", "Meal Policy", "2025-01-01")}
    assert answer_check("meal allowance", PASSAGES, ["meals"], dated, 0, ReviewPolicy(), today="2026-12-02") is None
    # a conflict the answer does not rest on is not its to hold
    assert answer_check("meal allowance", PASSAGES[:1], ["meals"], undated, 0, ReviewPolicy()) is None


def test_a_citation_of_a_missing_reference_goes_to_the_cited_documents_owner_or_the_fallback_group():
    records = {"meals": record("meals", "Meal Policy", "2025-01-01", owner="")}
    failed = answer_check("meal allowance", PASSAGES[:1], ["meals"], records, 2, ReviewPolicy("answer-reviewers"))
    assert failed.reason == ReviewReason.MISSING_REFERENCE and failed.reviewers == "answer-reviewers"
    assert answer_check("meal allowance", PASSAGES[:1], ["meals"], records, 0, ReviewPolicy()) is None
