"""Input is bounded, and the caller authenticated before the body is read.

Before: FastAPI read and parsed every body before the route looked at the caller's credential, and no
route bounded its body, so an anonymous client could make a replica read and parse any amount. Now
the caller is authenticated from headers before one byte of the body is read (401 with the body
unread), every route's body is bounded while it is read (413 `payload_too_large`; uploads get their
own, larger limit), and the groups an admin write may name are bounded in config. Driven through the
ASGI app (to count the bytes it consumed) and the HTTP client.
"""

from __future__ import annotations

import asyncio
import base64

import pytest

from tests.integration.conftest import make_home
from tests.integration.test_api import client_for

MB = 1024 * 1024
CHUNK = 64 * 1024


@pytest.fixture
def served(tmp_path):
    home = make_home(tmp_path / "home")
    with client_for(home) as client:
        yield home, client
    client.app.state.services.admin.wait_for_jobs(30)


def _call(app, path: str, headers: dict, total_bytes: int, chunk: bytes) -> tuple[int, int]:
    """POST a streamed body of `total_bytes` (no Content-Length) straight into the ASGI app;
    returns (status, body bytes the app consumed)."""
    consumed = 0
    status = None

    async def receive():
        nonlocal consumed
        if consumed >= total_bytes:
            return {"type": "http.disconnect"}
        consumed += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": consumed < total_bytes}

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
             "headers": [(k.lower().encode(), v.encode()) for k, v in {"content-type": "application/json",
                                                                       **headers}.items()],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}
    asyncio.run(app(scope, receive, send))
    return status, consumed


def test_an_anonymous_50_mb_body_is_refused_unread(served):
    home, client = served
    status, consumed = _call(client.app, "/v1/answer", {}, 50 * MB, b"x" * CHUNK)
    assert status == 401
    assert consumed < 1 * MB, f"{consumed:,} bytes read before the caller was known"
    status, consumed = _call(client.app, "/v1/admin/tenants/acme/documents", {}, 50 * MB, b"x" * CHUNK)
    assert status == 401 and consumed < 1 * MB


def test_an_unparsable_body_without_credential_is_401_not_422(served):
    home, client = served
    response = client.post("/v1/answer", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "missing_credential"


def test_an_authenticated_oversize_body_is_413_while_reading(served):
    home, client = served
    big = {"question": "hotel " * 40_000}  # ~240 kB, over the JSON routes' limit
    response = client.post("/v1/answer", json=big, headers=home.headers())
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "payload_too_large"
    status, consumed = _call(client.app, "/v1/answer", home.headers(), 50 * MB, b"x" * CHUNK)
    assert status == 413 and consumed < 1 * MB, f"{consumed:,} bytes read"


def test_uploads_have_their_own_limit_and_bounded_groups(served):
    home, client = served
    text = "# Notes\n\n## Travel\n\n" + "Hotels are booked through the travel desk. " * 6_000  # ~260 kB
    doc = {"document_id": "notes", "filename": "notes.md", "groups": ["staff"],
           "content_base64": base64.b64encode(text.encode()).decode()}
    accepted = client.post("/v1/admin/tenants/acme/documents", json=doc, headers=home.admin_headers())
    assert accepted.status_code == 202, accepted.text

    many = {**doc, "document_id": "notes-2", "groups": [f"g{i}" for i in range(5_000)]}
    refused = client.post("/v1/admin/tenants/acme/documents", json=many, headers=home.admin_headers())
    assert refused.status_code in (413, 422), refused.text
    for groups in ([f"g{i}" for i in range(5_000)], ["x" * 5_000]):
        acl = client.put("/v1/admin/tenants/acme/documents/expense-policy/acl", json={"groups": groups},
                         headers=home.admin_headers())
        assert acl.status_code in (413, 422), acl.text
    fine = client.put("/v1/admin/tenants/acme/documents/expense-policy/acl", json={"groups": ["staff", "finance"]},
                      headers=home.admin_headers())
    assert fine.status_code == 200, fine.text
