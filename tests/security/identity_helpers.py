"""Minting for the identity and admin-scope tests.

The tests drive the FastAPI app through the public entry points. These helpers create credentials
and keys through whatever the code under test offers, so the same test file also runs on the code
from before the identity rework (one shared HMAC key, credentials without tenants) and fails there by
behaviour (a 200 where a 401/403/404 is required), not by an import error.
"""

from __future__ import annotations

import concurrent.futures
import time

import jwt
from fastapi.testclient import TestClient

try:  # the identity package (citadel/identity/)
    from citadel.identity.credentials import add_credential as _add_scoped_credential
    from citadel.identity.keys import current_service_key
    SCOPED = True
except ImportError:  # before: citadel/identity.py, one signing key, no tenant scope
    from citadel.identity import add_credential as _add_global_credential
    from citadel.identity import load_or_create_signing_key
    SCOPED = False


def add_credential(home, service: str, tenants: list[str], admin: bool = False,
                   expires_at: float | None = None) -> str:
    """A bearer token for `service` acting for `tenants` (["*"]: all). Before tenant scopes existed
    the same call made a global credential, which is exactly what the tests catch."""
    path = home.config.credentials_path
    if SCOPED:
        return _add_scoped_credential(path, service, tenants, admin=admin, expires_at=expires_at)
    return _add_global_credential(path, service, admin=admin)


def signing_secret(home, service: str) -> tuple[str | None, bytes]:
    """(kid, secret) that `service` signs its user contexts with: its own HS256 key now; before,
    the one key every service shared (no kid)."""
    if SCOPED:
        key = current_service_key(home.config.service_keys_path, service, create=True)
        return key.kid, key.secret_bytes
    return None, load_or_create_signing_key(home.config.signing_key_path)


def forged_context(home, signer: str, claimed_service: str, tenant: str = "acme", groups=("staff",)) -> str:
    """A context naming `claimed_service` as its svc, signed with what `signer` holds."""
    kid, secret = signing_secret(home, signer)
    now = int(time.time())
    if not SCOPED:  # the old compact token: the shared key signs for any service
        from citadel.identity import sign_user_context

        return sign_user_context(secret, tenant, "mallory", list(groups), claimed_service, 300,
                                 home.config.identity.audience, now)
    claims = {"tenant": tenant, "sub": "mallory", "groups": list(groups), "iat": now, "exp": now + 300,
              "aud": home.config.identity.audience, "svc": claimed_service}
    return jwt.encode(claims, secret, algorithm="HS256", headers={"kid": kid})


def headers(home, token: str, service: str, tenant: str = "acme", groups=("staff",)) -> dict:
    return {"authorization": f"Bearer {token}",
            "x-citadel-user-context": home.user_context(tenant=tenant, groups=groups, service=service)}


def client_for(home) -> TestClient:
    from serving.http.api import create_api
    from serving.services.compose import build_services

    app = create_api()
    app.state.services = build_services(home.config)
    app.state.executor = concurrent.futures.ThreadPoolExecutor(4)
    return TestClient(app, raise_server_exceptions=False)


def error_code(response) -> str | None:
    try:
        return response.json().get("error", {}).get("code")
    except ValueError:
        return None
