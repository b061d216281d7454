"""What a candidate test item keeps and what an owner's label must say (citadel/quality/candidates.py):
texts masked and bounded, no question from a withheld one, only real edits and rejections of tool
calls, labels checked, and the tool items exported one JSONL file per tool."""

from __future__ import annotations

import json

import pytest

from citadel.catalog.base import WITHHELD_QUESTION
from citadel.catalog.sqlite import SQLiteCatalog
from citadel.errors import Conflict, InvalidRequest
from citadel.quality.candidates import MAX_COMMENT_CHARS, CandidateQueue
from citadel.tools.approvals import Approval, ApprovalStatus

TOOL = "crm.create_discount_approval"
PROPOSED = {"account_id": "acme", "discount_pct": 12, "term_months": 24}


@pytest.fixture
def catalog(tmp_path):
    catalog = SQLiteCatalog(tmp_path / "catalog.sqlite")
    catalog.ensure_tenant("northwind")
    yield catalog
    catalog.close()


def decided(approval_id: str, status=ApprovalStatus.APPROVED, final=None, **fields) -> Approval:
    return Approval(approval_id, "northwind", f"run-{approval_id}", "s1", TOOL, "sam", PROPOSED, "deal-desk",
                    status=status, final_args=final, decided_by="dana", decided_at=1.0, **fields)


def test_an_answer_item_keeps_masked_bounded_texts_and_no_withheld_question(catalog):
    queue = CandidateQueue(catalog)
    entry = {"question": "Call me on +44 20 7946 0958: what is the hotel limit?",
             "response": {"answer": "180 USD [1]", "outcome": "answered", "citations": [
                 {"document_id": "travel", "version": 2, "heading": "Hotels", "chunk_id": "c1"},
                 {"document_id": "travel", "version": 2, "heading": "Hotels", "chunk_id": "c2"}]}}
    comment = "card 4111 1111 1111 1111 " + "x" * 3_000
    candidate_id = queue.add_feedback("northwind", "a1", entry, "outdated", comment)
    item = catalog.candidate(candidate_id)["item"]
    assert item["question"] == "Call me on [phone]: what is the hotel limit?"
    assert item["comment"] == "[redacted]"  # a card number: the whole text goes, as in spans
    assert item["sources"] == [{"document_id": "travel", "version": 2, "heading": "Hotels", "chunk_id": "c1"}]
    long_comment = queue.add_feedback("northwind", "a2", entry, "other", "y" * 5_000)
    assert len(catalog.candidate(long_comment)["item"]["comment"]) == MAX_COMMENT_CHARS
    assert queue.add_feedback("northwind", "a3", {**entry, "question": WITHHELD_QUESTION}, "other", "") is None


def test_only_edits_and_rejections_of_real_tool_calls_are_queued(catalog):
    queue = CandidateQueue(catalog)
    assert queue.add_decision(decided("as-proposed", final=PROPOSED), "approve") is None
    assert queue.add_decision(decided("honeypot", final={**PROPOSED, "discount_pct": 10}, honeypot=True),
                              "edit_and_approve") is None
    expired = Approval("expired", "northwind", "run-x", "s1", TOOL, "sam", PROPOSED, "deal-desk",
                       status=ApprovalStatus.EXPIRED, decided_at=1.0)
    assert queue.add_decision(expired, "reject") is None  # no reviewer decided it
    edited = queue.add_decision(decided("edited", final={**PROPOSED, "term_months": 36}), "edit_and_approve")
    rejected = queue.add_decision(decided("rejected", ApprovalStatus.REJECTED, comment="no"), "reject")
    assert queue.add_decision(decided("edited", final={**PROPOSED, "term_months": 36}), "edit_and_approve") == edited
    assert [r["id"] for r in catalog.candidates("northwind", f"tool:{TOOL}")] == [edited, rejected]


def test_tool_labels_are_checked_and_tool_items_export_one_file_per_tool(catalog, tmp_path):
    queue = CandidateQueue(catalog)
    edited = catalog.candidate(queue.add_decision(decided("e", final={**PROPOSED, "term_months": 36}),
                                                  "edit_and_approve"))
    rejected = catalog.candidate(queue.add_decision(decided("r", ApprovalStatus.REJECTED), "reject"))
    for bad in ({"expect": "answer"}, {"expect": "approve"}, {"expect": "approve", "final_args": [1]},
                {"expect": "reject", "final_args": {}}, {"expect": "approve", "final_args": {}, "extra": 1},
                {"expect": "approve", "final_args": {"note": "x" * 70_000}}):
        with pytest.raises(InvalidRequest):
            queue.promote(edited, bad, "ops")
    right = {**PROPOSED, "term_months": 36, "discount_pct": 10}
    queue.promote(edited, {"expect": "approve", "final_args": right}, "ops")
    queue.promote(rejected, {"expect": "reject"}, "ops")
    with pytest.raises(Conflict):
        queue.dismiss(rejected, "ops")

    report = queue.export("northwind", tmp_path / "set.jsonl", tmp_path / "tools")
    assert report.answers == 0 and report.tools == {TOOL: 2} and (tmp_path / "set.jsonl").read_text() == ""
    lines = [json.loads(line) for line in (tmp_path / "tools" / f"{TOOL}.jsonl").read_text().splitlines()]
    assert [(line["expect"], line["final_args"], line["reviewer_decision"]) for line in lines] == \
        [("approve", right, "edit_and_approve"), ("reject", None, "reject")]
    assert all(line["tool"] == TOOL and line["proposed_args"] == PROPOSED and line["tenant"] == "northwind"
               for line in lines)
