"""The answer cache as the services see it (serving/services/answer_cache.py): an entry keeps the
answer's outcome, and one written before answers carried an outcome still loads, the outcome derived
from `refused` and `reason`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from citadel.answer.service import outcome_of
from citadel.config import CitadelConfig
from citadel.state.factory import make_state
from citadel.types import Principal
from serving.services.answer_cache import AnswerCacheView
from serving.services.metrics import ApiMetrics

STAFF = Principal("t", "u1", frozenset({"staff"}))
CITATION = {"chunk_id": "travel:3", "document_id": "travel", "title": "Travel policy", "version": 2,
            "heading": "Per diem", "page": None, "source": "travel.md"}


class OneDocumentCatalog:
    """Every principal reads `travel` at version 2 (the live check of a cache hit)."""

    def readable_documents(self, principal: Principal) -> dict:
        return {"travel": SimpleNamespace(version=2)}


@pytest.fixture
def cache() -> AnswerCacheView:
    config = CitadelConfig()
    return AnswerCacheView(config.state, OneDocumentCatalog(), make_state(config.state), ApiMetrics())


@pytest.mark.parametrize("refused, reason, citations, outcome", [
    (False, None, [CITATION], "answered"),
    (True, "not_confirmed", [CITATION], "not_confirmed"),
    (True, "low_coverage", [], "refused"),
])
def test_an_entry_written_before_answers_carried_an_outcome_loads_with_one(cache, refused, reason, citations,
                                                                           outcome):
    old = {"answer": "…", "refused": refused, "reason": reason, "citations": citations}  # no "outcome"
    cache.state.cache.put("k", old, "t", [c["document_id"] for c in citations])
    loaded = cache.get("k", STAFF, [])
    assert loaded == {**old, "outcome": outcome}


def test_an_entry_keeps_the_outcome(cache):
    body = {"request_id": "r1", "answer": "The documents I can see don't state it. The closest is: '…' [1]",
            "outcome": "not_confirmed", "refused": True, "reason": "not_confirmed", "degraded": [],
            "citations": [CITATION], "cached": False, "bundle_id": "b-0123456789ab"}
    degraded: list[str] = []
    cache.put("k", "t", body, degraded)
    stored = cache.state.cache.get("k")
    assert stored == {k: body[k] for k in ("answer", "outcome", "refused", "reason", "citations", "bundle_id")}
    loaded = cache.get("k", STAFF, degraded)
    assert loaded["outcome"] == "not_confirmed" == outcome_of(loaded["refused"], loaded["reason"])
    assert degraded == []
