"""Every ApprovalStore runs the approval-store suite (tests/conformance/suites/approval_store.py): in
process and SQLite (the suite's SQLite-only tests, two processes deciding the same approvals and an
unusable file, skip in process). The record's and the factory's own tests follow.
"""

from __future__ import annotations

import pytest

from citadel.config import CitadelConfig
from citadel.tools.approvals import Approval, MemoryApprovalStore
from citadel.tools.factory import make_approval_store
from tests.conformance.suites.approval_store import (ApprovalStoreConformance, Backend, clock, DEAL_DESK, LEADS,
                                                     new_approval)  # noqa: F401 (clock: fixtures)


class TestMemoryApprovalStore(ApprovalStoreConformance):
    @pytest.fixture
    def backend(self, clock, tmp_path):
        opened = Backend("memory", clock, tmp_path)
        yield opened
        opened.close()


class TestSQLiteApprovalStore(ApprovalStoreConformance):
    @pytest.fixture
    def backend(self, clock, tmp_path):
        opened = Backend("sqlite", clock, tmp_path)
        yield opened
        opened.close()


def test_deciders_are_the_approver_group_and_the_lead_group_only_once_escalated():
    approval = new_approval()
    assert approval.deciders() == (DEAL_DESK,)
    assert Approval(**{**approval.__dict__, "escalated": True}).deciders() == (DEAL_DESK, LEADS)
    no_lead = Approval(**{**approval.__dict__, "escalated": True, "lead_group": None})
    assert no_lead.deciders() == (DEAL_DESK,)
    same = Approval(**{**approval.__dict__, "escalated": True, "lead_group": DEAL_DESK})
    assert same.deciders() == (DEAL_DESK,)


def test_factory_refuses_unknown_backends(tmp_path):
    with pytest.raises(ValueError):
        make_approval_store(CitadelConfig(home=tmp_path), backend="redis")
    assert isinstance(make_approval_store(CitadelConfig(home=tmp_path), backend="memory"), MemoryApprovalStore)
