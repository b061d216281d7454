"""Over HTTP: a gateway whose embedder is another model (or dimension) than the one
the tenant's segment was built with refuses to search it with a clear 503, never a 500 and never
similarities across two models."""

from __future__ import annotations

import concurrent.futures

import pytest
from fastapi.testclient import TestClient

from citadel.config import load_config


@pytest.fixture
def client_with_another_model(home):
    from serving.http.api import create_api
    from serving.services.compose import build_services

    config = load_config(environ={"CITADEL_ANSWER__CONFIRM": "false", "CITADEL_HOME": str(home.config.home), "CITADEL_EMBEDDING__BACKEND": "hash",
                                  "CITADEL_EMBEDDING__DIM": "128"})  # Acme was embedded at 384 dimensions
    app = create_api()
    app.state.services = build_services(config)
    app.state.executor = concurrent.futures.ThreadPoolExecutor(2)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


@pytest.mark.parametrize("path, body", [("/v1/retrieve", {"query": "hotel limit"}),
                                        ("/v1/answer", {"question": "What is the hotel limit in London?"})])
def test_a_segment_of_another_model_is_a_clear_503(home, client_with_another_model, path, body):
    response = client_with_another_model.post(path, json=body, headers=home.headers())
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "embedding_model_mismatch"
    assert "reembed" in error["message"]
