"""Resilience wired into the gateway (fused, in-process): permission store down fails closed, the
embedder down falls back to keyword-only, a failing reranker is skipped, a slow generator trips its
breaker to the extractive fallback, a hung stage hits the deadline; faults only with config + admin."""

from __future__ import annotations

import concurrent.futures
import time

from fastapi.testclient import TestClient

from tests.integration.conftest import make_home


def drill_client(tmp_path, stages=None, **environ) -> tuple[TestClient, object]:
    from serving.http.api import create_api
    from serving.services.compose import build_services

    home = make_home(tmp_path / "home", CITADEL_SERVING__FAULT_INJECTION="true", **environ)
    app = create_api()
    app.state.services = build_services(home.config, stages)
    app.state.executor = concurrent.futures.ThreadPoolExecutor(4)
    return TestClient(app), home


def set_fault(client, home, stage: str, **spec) -> None:
    response = client.put(f"/v1/admin/faults/{stage}", json=spec, headers=home.admin_headers())
    assert response.status_code == 200, response.text


def clear_fault(client, home, stage: str) -> None:
    assert client.delete(f"/v1/admin/faults/{stage}", headers=home.admin_headers()).status_code == 200


def wait_for_fault_cache() -> None:
    time.sleep(0.6)  # the fault store re-reads a stage's file at most every 0.5 s


def test_permission_store_down_fails_closed_with_503(tmp_path):
    client, home = drill_client(tmp_path)
    assert client.post("/v1/retrieve", json={"query": "hotel"}, headers=home.headers()).status_code == 200
    set_fault(client, home, "catalog", error_rate=1.0)
    wait_for_fault_cache()
    for path, body in (("/v1/retrieve", {"query": "hotel"}), ("/v1/answer", {"question": "hotel limit?"})):
        response = client.post(path, json=body, headers=home.headers())
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "permissions_unavailable"
        assert "passages" not in response.text
    clear_fault(client, home, "catalog")


def test_embedder_down_falls_back_to_keyword_only(tmp_path):
    client, home = drill_client(tmp_path)
    set_fault(client, home, "embedder", error_rate=1.0)
    wait_for_fault_cache()
    body = client.post("/v1/retrieve", json={"query": "hotel limit per night"}, headers=home.headers()).json()
    assert "keyword_only" in body["degraded"] and body["passages"]


class FailingReranker:
    model_id = "failing"
    enabled = True

    def rerank(self, question, passages, top_n):
        raise RuntimeError("reranker replica crashed")


def test_failing_reranker_is_skipped_and_answers_continue(tmp_path):
    from citadel.wiring import Stages

    client, home = drill_client(tmp_path, Stages(reranker=FailingReranker()))
    body = client.post("/v1/answer", json={"question": "What is the hotel limit per night in London?"},
                       headers=home.headers()).json()
    assert "rerank_skipped" in body["degraded"] and not body["refused"] and body["citations"]


def test_slow_generator_trips_its_breaker_to_the_extractive_fallback(tmp_path):
    client, home = drill_client(tmp_path, CITADEL_RESILIENCE__BREAKERS__GENERATOR__P95_THRESHOLD_MS="50",
                                CITADEL_RESILIENCE__BREAKERS__GENERATOR__MIN_SAMPLES="3",
                                CITADEL_STATE__ANSWER_CACHE_ENABLED="false")
    set_fault(client, home, "generator", latency_ms=150)
    wait_for_fault_cache()
    question = {"question": "What is the hotel limit per night in London?"}
    for _ in range(3):
        body = client.post("/v1/answer", json=question, headers=home.headers()).json()
        assert "generator_fallback" not in body["degraded"]  # slow but answered by the primary
    started = time.perf_counter()
    body = client.post("/v1/answer", json=question, headers=home.headers()).json()
    assert "generator_fallback" in body["degraded"] and body["citations"]
    assert time.perf_counter() - started < 0.15  # the open breaker does not wait for the slow backend
    metrics = client.get("/metrics", headers=home.metrics_headers()).text
    assert 'citadel_breaker_transitions_total{breaker="generator",to="open"} 1.0' in metrics


def test_a_hung_stage_hits_the_request_deadline(tmp_path):
    client, home = drill_client(tmp_path, CITADEL_SERVING__REQUEST_TIMEOUT_S="0.5")
    set_fault(client, home, "retriever", hang=True, max_hang_s=5)
    wait_for_fault_cache()
    response = client.post("/v1/retrieve", json={"query": "hotel"}, headers=home.headers())
    assert response.status_code == 504 and response.json()["error"]["code"] == "deadline_exceeded"
    clear_fault(client, home, "retriever")  # releases the hung worker thread


def test_faults_need_config_and_an_admin(tmp_path):
    client, home = drill_client(tmp_path)
    spec = {"latency_ms": 10}
    response = client.put("/v1/admin/faults/generator", json=spec, headers={"authorization": f"Bearer {home.service_token}"})
    assert response.status_code == 403 and response.json()["error"]["code"] == "admin_required"
    assert client.put("/v1/admin/faults/nowhere", json=spec, headers=home.admin_headers()).status_code == 422

    from tests.integration.test_api import client_for

    home_off = make_home(tmp_path / "off")
    with client_for(home_off) as off:
        response = off.put("/v1/admin/faults/generator", json=spec, headers=home_off.admin_headers())
        assert response.status_code == 403 and response.json()["error"]["code"] == "fault_injection_disabled"
