"""Queries served over HTTP count for their tenant's tier (citadel/retrieval/traffic.py): the serving
process's counts reach the catalog's row of the day, off the request's path, and the partition's tier
does not change with them (a move waits for a publish or compaction)."""

from __future__ import annotations

import concurrent.futures
import time

from fastapi.testclient import TestClient

from citadel.catalog.sqlite import SQLiteCatalog
from citadel.segments.tiering import day_of
from tests.integration.conftest import make_home


def test_retrievals_over_http_reach_the_catalogs_day_row(tmp_path):
    from serving.http.api import create_api
    from serving.services.compose import build_services

    home = make_home(tmp_path / "home", CITADEL_INDEX__TRAFFIC_FLUSH_S="0.05")
    app = create_api()
    app.state.services = build_services(home.config)
    app.state.executor = concurrent.futures.ThreadPoolExecutor(2)
    client = TestClient(app)
    catalog = SQLiteCatalog(home.config.catalog_path)
    tier = catalog.tier_entries(["acme"])["acme"]
    counted = 0
    deadline = time.monotonic() + 5
    while counted < 3 and time.monotonic() < deadline:  # a flush is due 0.05 s after the last one
        response = client.post("/v1/retrieve", json={"query": "hotel limit"}, headers=home.headers())
        assert response.status_code == 200 and response.json()["passages"]
        time.sleep(0.06)
        counted = catalog.queries_since(["acme"], day_of(time.time())).get("acme", 0)
    assert counted >= 3
    assert catalog.tier_entries(["acme"])["acme"] == tier
    catalog.close()
