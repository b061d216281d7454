"""A Citadel home with the Acme example ingested (hash embedder), credentials and per-service signing
keys, and helpers to call the API as a service on behalf of a user."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from citadel.config import CitadelConfig, load_config

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
# The metrics credential every test home accepts on GET /metrics (serving.metrics_tokens_sha256).
METRICS_TOKEN = "test-metrics-token"
METRICS_TOKEN_SHA256 = hashlib.sha256(METRICS_TOKEN.encode()).hexdigest()
# For drills: the catalog's breaker returns within seconds instead of its production cooldown and
# staged return (CITADEL_RESILIENCE__BREAKERS merges over the defaults).
FAST_CATALOG_BREAKER = '{"catalog": {"cooldown_s": 2, "probe_interval_s": 0.5, "stage_duration_s": 1}}'


@dataclass
class Home:
    config: CitadelConfig
    service_token: str
    admin_token: str

    def user_context(self, tenant: str = "acme", user: str = "alice", groups=("staff",), service: str = "app",
                     ttl_s: int = 300, now: float | None = None) -> str:
        """A context signed with `service`'s own HS256 key (made on first use), as that service would."""
        from citadel.identity.context import sign_user_context
        from citadel.identity.keys import current_service_key

        key = current_service_key(self.config.service_keys_path, service, create=True)
        return sign_user_context(key, tenant, user, list(groups), ttl_s, self.config.identity.audience,
                                 int(now if now is not None else time.time()))

    def headers(self, **context) -> dict:
        return {"authorization": f"Bearer {self.service_token}", "x-citadel-user-context": self.user_context(**context)}

    def metrics_headers(self) -> dict:
        return {"authorization": f"Bearer {METRICS_TOKEN}"}

    def admin_headers(self, **extra) -> dict:
        return {"authorization": f"Bearer {self.admin_token}", **extra}


def make_home(root: Path, **environ: str) -> Home:
    """Ingest Acme (staff+exec; the executive allowance exec-only) into a fresh home."""
    from citadel.identity.credentials import ALL_TENANTS, add_credential
    from citadel.ingest.local import Ingestor
    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.embedding.factory import make_embedder
    from citadel.ingest.sources import AclSpec, discover

    config = load_config(environ={"CITADEL_ANSWER__CONFIRM": "false", "CITADEL_HOME": str(root), "CITADEL_EMBEDDING__BACKEND": "hash",
                                  "CITADEL_SERVING__METRICS_TOKENS_SHA256": f'["{METRICS_TOKEN_SHA256}"]',
                                  # no deliberately wrong approvals unless a test plants them itself
                                  "CITADEL_TOOLS__HONEYPOT_RATE": "0", **environ})
    catalog = SQLiteCatalog(config.catalog_path)
    files = [f for f in discover([EXAMPLES / "acme"], trust_front_matter=True) if "travel-policy-v3" not in f.source]
    Ingestor(catalog, make_embedder(config.embedding), config).ingest(
        "acme", files, AclSpec.from_file(EXAMPLES / "acme" / "acl.yaml"))
    catalog.close()
    # the shared fixtures act for every tenant; tests/security scopes credentials to tenants
    service = add_credential(config.credentials_path, "app", [ALL_TENANTS])
    admin = add_credential(config.credentials_path, "ops", [ALL_TENANTS], admin=True)
    return Home(config, service, admin)


@pytest.fixture
def home(tmp_path) -> Home:
    return make_home(tmp_path / "home")
