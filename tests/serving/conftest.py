"""A Citadel home with the Acme example ingested (hash embedder), credentials and a signing key,
and helpers to call the API as a service on behalf of a user."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from citadel.config import CitadelConfig, load_config

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@dataclass
class Home:
    config: CitadelConfig
    service_token: str
    admin_token: str
    key: bytes

    def user_context(self, tenant: str = "acme", user: str = "alice", groups=("staff",), service: str = "app",
                     ttl_s: int = 300, now: float | None = None) -> str:
        from citadel.identity import sign_user_context

        return sign_user_context(self.key, tenant, user, list(groups), service, ttl_s, self.config.identity.audience,
                                 int(now if now is not None else time.time()))

    def headers(self, **context) -> dict:
        return {"authorization": f"Bearer {self.service_token}", "x-citadel-user-context": self.user_context(**context)}

    def admin_headers(self, **extra) -> dict:
        return {"authorization": f"Bearer {self.admin_token}", **extra}


def make_home(root: Path, **environ: str) -> Home:
    """Ingest Acme (staff+exec; the executive allowance exec-only) into a fresh home."""
    from citadel.identity import add_credential, load_or_create_signing_key
    from citadel.ingestion import Ingestor
    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.embedding.factory import make_embedder
    from citadel.sources import AclSpec, discover

    config = load_config(environ={"CITADEL_HOME": str(root), "CITADEL_EMBEDDING__BACKEND": "hash", **environ})
    catalog = SQLiteCatalog(config.catalog_path)
    files = [f for f in discover([EXAMPLES / "acme"]) if "travel-policy-v3" not in f.source]
    Ingestor(catalog, make_embedder(config.embedding), config).ingest(
        "acme", files, AclSpec.from_file(EXAMPLES / "acme" / "acl.yaml"))
    catalog.close()
    service = add_credential(config.credentials_path, "app")
    admin = add_credential(config.credentials_path, "ops", admin=True)
    return Home(config, service, admin, load_or_create_signing_key(config.signing_key_path))


@pytest.fixture
def home(tmp_path) -> Home:
    return make_home(tmp_path / "home")
