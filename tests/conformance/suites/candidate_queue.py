"""The CandidateQueue suite (citadel/catalog/base.py; citadel/quality/candidates.py): the catalog's
queue of candidate test items, on every catalog backend: queued once per origin, per tenant and
source, bounded, decided once and audited, read back in pages, and forgotten with a withdrawn
document they cite."""

from __future__ import annotations

import pytest

from citadel.catalog.base import Catalog

FEEDBACK = "answer_feedback"
TOOL = "tool:crm.create_discount_approval"


def answer_item(*documents: str) -> dict:
    return {"question": "What is the hotel limit?", "answer": "£200 [1]", "reason": "wrong_source",
            "sources": [{"document_id": d, "version": 1} for d in documents]}


class CandidateQueueConformance:
    """Override `backend` with an empty catalog (tests/conformance/suites/catalog.py has the backends)."""

    @pytest.fixture
    def backend(self) -> Catalog:
        raise NotImplementedError("a conformance subclass provides an empty catalog")

    @pytest.fixture
    def catalog(self, backend):
        for tenant in ("acme", "globex"):
            backend.ensure_tenant(tenant)
        yield backend
        backend.close()

    def test_the_same_origin_is_queued_once_per_tenant_and_source(self, catalog: Catalog):
        first = catalog.queue_candidate("acme", FEEDBACK, "answer:a1", answer_item("expense-policy"), 10)
        again = catalog.queue_candidate("acme", FEEDBACK, "answer:a1", {"question": "changed"}, 10)
        assert isinstance(first, int) and again == first
        other_tenant = catalog.queue_candidate("globex", FEEDBACK, "answer:a1", answer_item(), 10)
        other_source = catalog.queue_candidate("acme", TOOL, "answer:a1", {"tool": "crm.create_discount_approval"}, 10)
        assert len({first, other_tenant, other_source}) == 3
        [row] = catalog.candidates("acme", FEEDBACK)
        assert row["item"] == answer_item("expense-policy")  # the first one, unchanged
        assert (row["id"], row["tenant_id"], row["source"], row["origin"], row["status"]) == \
            (first, "acme", FEEDBACK, "answer:a1", "pending")
        assert row["label"] is None and row["decided_at"] is None and row["decided_by"] is None and row["created_at"] > 0
        assert catalog.candidate(first) == row and catalog.candidate(first + 1000) is None

    def test_reads_filter_by_source_and_status_and_page_by_id(self, catalog: Catalog):
        ids = [catalog.queue_candidate("acme", FEEDBACK, f"answer:{i}", answer_item(), 100) for i in range(5)]
        tool_id = catalog.queue_candidate("acme", TOOL, "approval:x", {"tool": "crm.create_discount_approval"}, 100)
        assert [r["id"] for r in catalog.candidates("acme")] == [*ids, tool_id]
        assert [r["id"] for r in catalog.candidates("acme", TOOL)] == [tool_id]
        assert [r["id"] for r in catalog.candidates("acme", FEEDBACK, limit=2)] == ids[:2]
        assert [r["id"] for r in catalog.candidates("acme", FEEDBACK, limit=2, after_id=ids[1])] == ids[2:4]
        catalog.decide_candidate(ids[0], "dismissed", None, "ops")
        assert [r["id"] for r in catalog.candidates("acme", status="pending")] == [*ids[1:], tool_id]
        assert [r["id"] for r in catalog.candidates("acme", FEEDBACK, "dismissed")] == [ids[0]]
        assert catalog.candidates("globex") == []

    def test_a_candidate_is_decided_once_and_the_decision_is_audited(self, catalog: Catalog):
        candidate_id = catalog.queue_candidate("acme", FEEDBACK, "answer:a1", answer_item("expense-policy"), 10)
        label = {"expect": "answer", "expected_documents": ["expense-policy"]}
        decided = catalog.decide_candidate(candidate_id, "promoted", label, "ops")
        assert (decided["status"], decided["label"], decided["decided_by"]) == ("promoted", label, "ops")
        assert decided["decided_at"] >= decided["created_at"]
        assert catalog.decide_candidate(candidate_id, "dismissed", None, "someone-else") is None
        assert catalog.candidate(candidate_id)["status"] == "promoted"
        assert catalog.decide_candidate(candidate_id + 1000, "dismissed", None, "ops") is None
        [audit] = [r for r in catalog.audit_log("acme") if r["action"].startswith("candidate_")]
        assert (audit["action"], audit["actor"], audit["target"]) == ("candidate_promoted", "ops", str(candidate_id))
        assert audit["detail"] == {"source": FEEDBACK, "origin": "answer:a1"}

    def test_a_full_source_queues_nothing_until_an_item_is_decided(self, catalog: Catalog):
        first, second = (catalog.queue_candidate("acme", FEEDBACK, f"answer:{i}", answer_item(), 2) for i in range(2))
        assert catalog.queue_candidate("acme", FEEDBACK, "answer:3", answer_item(), 2) is None
        assert catalog.queue_candidate("acme", FEEDBACK, "answer:0", answer_item(), 2) == first  # known: its id
        assert catalog.queue_candidate("acme", TOOL, "approval:x", {}, 2) is not None  # another source has room
        catalog.decide_candidate(second, "dismissed", None, "ops")
        assert catalog.queue_candidate("acme", FEEDBACK, "answer:3", answer_item(), 2) is not None

    def test_a_withdrawal_forgets_the_candidates_whose_answer_cites_the_document(self, catalog: Catalog):
        citing = catalog.queue_candidate("acme", FEEDBACK, "answer:a1", answer_item("memo", "other"), 10)
        promoted = catalog.queue_candidate("acme", FEEDBACK, "answer:a2", answer_item("memo"), 10)
        catalog.decide_candidate(promoted, "promoted", {"expect": "refuse"}, "ops")
        kept = catalog.queue_candidate("acme", FEEDBACK, "answer:a3", answer_item("other"), 10)
        tool = catalog.queue_candidate("acme", TOOL, "approval:x", {"tool": "crm.create_discount_approval"}, 10)
        elsewhere = catalog.queue_candidate("globex", FEEDBACK, "answer:a1", answer_item("memo"), 10)
        catalog.forget_answers_citing("acme", "memo")
        assert [r["id"] for r in catalog.candidates("acme")] == [kept, tool]
        assert catalog.candidate(citing) is None and catalog.candidate(promoted) is None
        assert [r["id"] for r in catalog.candidates("globex")] == [elsewhere]
