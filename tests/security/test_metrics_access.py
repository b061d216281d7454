"""`/metrics` needs a metrics credential, and its tenant label is bounded.

Before: anyone who reached the port read every tenant's traffic, and each tenant id a caller named
became a new time series. Now /metrics answers only a metrics credential (a bearer token configured in
`serving.metrics_tokens_sha256`; service and admin credentials are not enough), and the `tenant`
label has at most `serving.metrics_max_tenants` values by name plus "other". Driven through the
HTTP app.
"""

from __future__ import annotations

import hashlib
import re

import pytest

from citadel.config import ServingConfig
from tests.integration.conftest import make_home
from tests.integration.test_api import client_for

METRICS_TOKEN = "scraper-token-for-this-test"
SCRAPER = {"authorization": f"Bearer {METRICS_TOKEN}"}
CALLED_TENANTS = 80


def _metrics_config() -> dict:
    """The metrics credential, set only where the config has the field (so this file also runs on the
    code from before it, and fails there by behaviour)."""
    if "metrics_tokens_sha256" not in ServingConfig.model_fields:
        return {}
    digest = hashlib.sha256(METRICS_TOKEN.encode()).hexdigest()
    return {"CITADEL_SERVING__METRICS_TOKENS_SHA256": f'["{digest}"]', "CITADEL_SERVING__METRICS_MAX_TENANTS": "20"}


@pytest.fixture
def served(tmp_path):
    home = make_home(tmp_path / "home", **_metrics_config())
    with client_for(home) as client:
        yield home, client


def test_metrics_need_a_metrics_credential(served):
    home, client = served
    assert client.get("/metrics").status_code in (401, 404)
    assert client.get("/metrics", headers={"authorization": "Bearer guess"}).status_code in (401, 404)
    for not_a_scraper in (home.headers(), home.admin_headers()):
        assert client.get("/metrics", headers=not_a_scraper).status_code in (401, 403, 404)
    scraped = client.get("/metrics", headers=SCRAPER)
    assert scraped.status_code == 200 and "citadel_requests_total" in scraped.text


def test_the_tenant_label_is_bounded_whatever_tenants_callers_name(served):
    home, client = served
    for i in range(CALLED_TENANTS):
        response = client.post("/v1/retrieve", json={"query": "hotel"}, headers=home.headers(tenant=f"tenant-{i}"))
        assert response.status_code == 200, response.text
    text = client.get("/metrics", headers=SCRAPER).text
    tenants = set(re.findall(r'citadel_requests_total\{[^}]*tenant="([^"]*)"', text))
    assert len(tenants) <= 21, f"{len(tenants)} tenant label values"
    assert "other" in tenants and "tenant-0" in tenants
