"""`citadel drill permissions` on the fake embedder: the permission store down under load gives only
503 permissions_unavailable and no passage without a live check; a failing reranker leaves answers
flowing, marked degraded."""

import pytest

from tests.integration.conftest import FAST_CATALOG_BREAKER, make_home

pytestmark = pytest.mark.slow


def test_permission_drill_fails_closed_and_reranker_drill_degrades(tmp_path):
    from benchmarks.drills import drill_permissions

    # the catalog's breaker returns within seconds (its staged return is not what this drill checks)
    home = make_home(tmp_path / "home", CITADEL_RESILIENCE__BREAKERS=FAST_CATALOG_BREAKER)
    report = drill_permissions(home.config, concurrency=2, phase_s=1.5, log=lambda row: None)
    down, reranker = report["permissions_down"], report["reranker_failing"]
    assert report["healthy"]["ok"] == report["healthy"]["responses"] > 0
    assert down["responses"] == down["503_permissions_unavailable"] > 0 and down["passages_returned"] == 0
    assert reranker["ok"] == reranker["responses"] > 0 and reranker["degraded_rerank_skipped"] > 0
    for phase in ("healthy", "permissions_down", "reranker_failing"):
        assert report[phase]["passages_without_live_check"] == 0
    assert report["healthy"]["passages_returned"] > 0
