"""Every PassageRetriever runs the retriever suite (tests/conformance/suites/retriever.py): the
in-process Retriever, GuardedRetriever (the fused topology's, with the retriever breaker of a
serving process's Resilience), and RemoteRetriever through a fake Serve handle over a replica of the
in-process one, plain and with the serving path's hedged, retried reads."""

from __future__ import annotations

import pytest

from citadel.resilience.guards import GuardedRetriever
from tests.conformance.suites.retriever import QUERY, STAFF_A, RetrieverConformance
from tests.fake_serve import FakeServeHandle, RetrieverReplica


def _remote(home, resilience=None):
    from citadel.answer.service import QueryVectorMemo
    from serving.ray.remote import RemoteRetriever

    wiring = home.wiring
    handle = FakeServeHandle(RetrieverReplica(wiring.retriever, wiring.memo))
    return RemoteRetriever(handle, timeout_s=10.0, memo=QueryVectorMemo(wiring.embedder), resilience=resilience)


class TestRetriever(RetrieverConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, home):
        return home.wiring.retriever


class TestGuardedRetriever(RetrieverConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, home):
        from citadel.resilience.process import process_resilience

        return GuardedRetriever(home.wiring.retriever, process_resilience(home.wiring.config).guard("retriever"))


class TestRemoteRetriever(RetrieverConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, home):
        return _remote(home)

    def test_each_call_is_routed_by_the_callers_tenant_and_fills_the_gateways_memo(self, backend):
        handle = backend._handle
        before = len(handle.calls)
        backend.retrieve(STAFF_A, QUERY)
        assert handle.calls[before:] == [("retrieve", "a")]
        assert backend._memo.recall(QUERY) is not None, "the gate reuses the query's vector"


class TestHedgedRemoteRetriever(RetrieverConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, home):
        from citadel.resilience.process import process_resilience

        return _remote(home, process_resilience(home.wiring.config))

    def test_reads_go_through_the_hedge(self, backend):
        before = backend.stats()["requests"]
        backend.retrieve(STAFF_A, QUERY)
        assert backend.stats()["requests"] == before + 1
