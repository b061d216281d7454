"""The example CRM (examples/crm): an external system Citadel's tools call on behalf
of a user. In process with a real verifier over a temporary Citadel home (no Ray), called with access
tokens the example token service's own exchange logic issued (examples/idp, RFC 8693): who
may read and write, one record per external_id even under concurrent calls, 422 for bad input; then
the launcher really starts a loopback process and leaves nothing behind."""

from __future__ import annotations

import base64
import threading
from dataclasses import dataclass

import httpx
import psutil
import pytest
from fastapi.testclient import TestClient

from citadel.config import load_config
from citadel.identity.credentials import add_credential
from examples.crm.store import CrmStore
from examples.idp.exchange import GRANT_TOKEN_EXCHANGE, JWT_TYPE, TokenService
from examples.idp.keys import publish_jwks, signing_key
from tests.integration.conftest import Home

TOOLS = "citadel-tools"  # the service relaying users' calls (Citadel's tool runner); it has no rights of its own
CRM_TOOLS = "crm.get_account crm.add_note crm.create_discount_approval"
SALES = {"tenant": "northwind", "user": "sam", "groups": ("sales",), "service": TOOLS}
DEAL_DESK = {"tenant": "northwind", "user": "dana", "groups": ("deal-desk",), "service": TOOLS}
SUPPORT = {"tenant": "northwind", "user": "sue", "groups": ("support",), "service": TOOLS}
OTHER_TENANT_SALES = {"tenant": "contoso", "user": "carl", "groups": ("sales",), "service": TOOLS}


def _approval(external_id: str = "run_1:step-2", **overrides) -> dict:
    return {"account_id": "acme", "discount_pct": 12, "term_months": 24, "external_id": external_id, **overrides}


@dataclass
class CrmHome(Home):
    """`headers(**user)`: what Citadel's tools present for that user — an access token the token service
    issued for the CRM from the user's own context (signed by the app the user signed in to)."""

    idp: TokenService | None = None

    def access_token(self, tenant: str, user: str, groups=(), scope: str = CRM_TOOLS, audience: str = "crm",
                     **_: str) -> str:
        context = self.user_context(tenant=tenant, user=user, groups=groups, service="app")
        form = {"grant_type": GRANT_TOKEN_EXCHANGE, "subject_token": context, "subject_token_type": JWT_TYPE,
                "audience": audience, "scope": scope}
        client = "Basic " + base64.b64encode(f"{TOOLS}:{self.service_token}".encode()).decode()
        return self.idp.exchange(client, form)["access_token"]

    def headers(self, **user) -> dict:
        return {"authorization": f"Bearer {self.access_token(**user)}"}


@pytest.fixture
def home(tmp_path) -> CrmHome:
    """A bare Citadel home: the tools' credential (two tenants), the token service's key and JWKS."""
    config = load_config(environ={"CITADEL_ANSWER__CONFIRM": "false", "CITADEL_HOME": str(tmp_path / "home")})
    token = add_credential(config.credentials_path, TOOLS, ["northwind", "contoso"])
    home = CrmHome(config, token, admin_token="")
    key = signing_key(config)
    publish_jwks(config.home, key)  # before any CRM reads it
    home.user_context(service="app")  # the app's signing key exists before the token service reads the key file
    home.idp = TokenService(config, key)
    return home


@pytest.fixture
def client(home):
    from examples.crm.server import create_app, verifier_from_config

    app = create_app(home.config.home / "crm" / "crm.sqlite", verifier_from_config(home.config))
    with TestClient(app) as c:
        yield c
    app.state.store.close()


def _store(client) -> CrmStore:
    return client.app.state.store


def test_a_sales_user_reads_an_account_with_the_facts_of_the_northwind_documents(client, home):
    got = client.get("/v1/accounts/acme", headers=home.headers(**SALES))
    assert got.status_code == 200, got.text
    # examples/northwind/acme-account-facts.md and acme-msa.md
    assert got.json() == {"tenant_id": "northwind", "account_id": "acme", "name": "Acme Corporation", "region": "EMEA",
                          "annual_revenue": 740000, "customer_since": "2023-01-15", "owner_group": "sales"}
    assert client.get("/v1/accounts/acme", headers=home.headers(**DEAL_DESK)).status_code == 200


def test_another_tenants_user_and_a_user_outside_the_groups_see_no_account(client, home):
    missing = client.get("/v1/accounts/nosuch", headers=home.headers(**SALES))
    assert missing.status_code == 404
    for user in (OTHER_TENANT_SALES, SUPPORT):
        got = client.get("/v1/accounts/acme", headers=home.headers(**user))
        assert got.status_code == 404, got.text
        assert got.json() == missing.json()  # indistinguishable from an id that does not exist
    # a sales user cannot read an account owned by another group either
    assert client.get("/v1/accounts/initech", headers=home.headers(**SALES)).status_code == 404


def test_writing_needs_the_owner_group_403_when_readable_404_otherwise(client, home):
    """Documented rule: a reader without the owner group (deal-desk) is 403 `not_permitted`; a user
    who cannot even read the account gets the 404 of a missing one."""
    refused = client.post("/v1/discount-approvals", json=_approval(), headers=home.headers(**DEAL_DESK))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "not_permitted"
    hidden = client.post("/v1/discount-approvals", json=_approval(), headers=home.headers(**SUPPORT))
    assert hidden.status_code == 404
    other_tenant = client.post("/v1/accounts/acme/notes", json={"text": "hi", "external_id": "n-1"},
                               headers=home.headers(**OTHER_TENANT_SALES))
    assert other_tenant.status_code == 404
    assert _store(client).count_approvals() == 0 and _store(client).count_notes() == 0


def test_every_route_but_healthz_needs_a_verified_user(client, home):
    assert client.get("/healthz").status_code == 200
    # the tools' own credential, or a user's context for Citadel, is not an access token for the CRM
    credential = client.get("/v1/accounts/acme", headers={"authorization": f"Bearer {home.service_token}"})
    assert credential.status_code == 401
    no_bearer = client.get("/v1/accounts/acme", headers={"x-citadel-user-context": home.user_context(**SALES)})
    assert no_bearer.status_code == 401 and no_bearer.json()["error"]["code"] == "missing_credential"
    app_context = client.get("/v1/accounts/acme",
                             headers={"authorization": f"Bearer {home.user_context(**{**SALES, 'service': 'app'})}"})
    assert app_context.status_code == 401
    # a token the token service issued for another system is not for the CRM
    elsewhere = client.get("/v1/accounts/acme", headers={"authorization": f"Bearer "
                                                         f"{home.access_token(**SALES, audience='erp')}"})
    assert elsewhere.status_code == 401 and elsewhere.json()["error"]["code"] == "wrong_audience"
    # unauthenticated bad input is 401, not a 422 that would describe the API to a stranger
    assert client.post("/v1/discount-approvals", json={"discount_pct": 900}).status_code == 401


def test_a_write_needs_a_token_issued_for_its_tool(client, home):
    """A token's scope names the tools it was issued for: one for reading cannot create an approval."""
    reader = {"authorization": f"Bearer {home.access_token(**SALES, scope='crm.get_account')}"}
    assert client.get("/v1/accounts/acme", headers=reader).status_code == 200
    refused = client.post("/v1/discount-approvals", json=_approval(), headers=reader)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_scope"
    note_only = {"authorization": f"Bearer {home.access_token(**SALES, scope='crm.add_note')}"}
    assert client.post("/v1/discount-approvals", json=_approval(), headers=note_only).status_code == 403
    assert client.post("/v1/accounts/acme/notes", json={"text": "hi", "external_id": "n-1"},
                       headers=note_only).status_code == 201
    assert _store(client).count_approvals() == 0


def test_one_external_id_makes_one_approval_and_a_repeat_returns_it_unchanged(client, home):
    first = client.post("/v1/discount-approvals", json=_approval(), headers=home.headers(**SALES))
    assert first.status_code == 201, first.text
    record = first.json()
    assert record["requested_by"] == "sam" and record["discount_pct"] == 12 and record["term_months"] == 24
    again = client.post("/v1/discount-approvals", json=_approval(discount_pct=40), headers=home.headers(**SALES))
    assert again.status_code == 200 and again.json() == record  # the first record, not the new arguments
    assert _store(client).count_approvals(external_id="run_1:step-2") == 1
    found = client.get("/v1/discount-approvals", params={"external_id": "run_1:step-2"}, headers=home.headers(**SALES))
    assert found.status_code == 200 and found.json() == record
    listed = client.get("/v1/discount-approvals", params={"account_id": "acme"}, headers=home.headers(**DEAL_DESK))
    assert listed.json() == {"approvals": [record]}
    unknown = client.get("/v1/discount-approvals", params={"external_id": "run_9:step-1"},
                         headers=home.headers(**SALES))
    assert unknown.status_code == 404
    # the key does not reach across tenants, nor hand back a record for an account not checked
    assert client.get("/v1/discount-approvals", params={"external_id": "run_1:step-2"},
                      headers=home.headers(**OTHER_TENANT_SALES)).status_code == 404
    reused = client.post("/v1/discount-approvals", json=_approval(account_id="globex"), headers=home.headers(**SALES))
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "external_id_conflict"


def test_notes_are_idempotent_too(client, home):
    body = {"text": "Asked for a 24-month renewal.\nFollow up in March.", "external_id": "run_1:step-1"}
    first = client.post("/v1/accounts/acme/notes", json=body, headers=home.headers(**SALES))
    again = client.post("/v1/accounts/acme/notes", json={**body, "text": "other"}, headers=home.headers(**SALES))
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json() and first.json()["author"] == "sam"
    assert _store(client).count_notes() == 1


def test_concurrent_creates_with_one_external_id_leave_one_row(client, home):
    threads_n = 8
    barrier, statuses, bodies = threading.Barrier(threads_n), [], []
    headers = home.headers(**SALES)

    def create():
        barrier.wait()
        response = client.post("/v1/discount-approvals", json=_approval("run_2:step-4"), headers=headers)
        statuses.append(response.status_code)
        bodies.append(response.json())

    threads = [threading.Thread(target=create) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(statuses) == [200] * (threads_n - 1) + [201]
    assert all(b == bodies[0] for b in bodies)
    assert _store(client).count_approvals(external_id="run_2:step-4") == 1


def test_separate_connections_racing_on_one_external_id_leave_one_row(tmp_path):
    """What two CRM processes would do: one connection each, the UNIQUE constraint decides."""
    path, threads_n = tmp_path / "crm.sqlite", 6
    stores = [CrmStore(path) for _ in range(threads_n)]
    barrier, results = threading.Barrier(threads_n), []

    def create(store: CrmStore):
        barrier.wait()
        results.append(store.create_discount_approval("northwind", "acme", 12, 24, "sam", "run_3:step-1"))

    threads = [threading.Thread(target=create, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(created for _, created in results) == 1
    assert len({record.approval_id for record, _ in results}) == 1
    assert stores[0].count_approvals() == 1
    for store in stores:
        store.close()


@pytest.mark.parametrize("path,body,field", [
    ("/v1/discount-approvals", _approval(discount_pct=150), "discount_pct"),
    ("/v1/discount-approvals", _approval(discount_pct=-1), "discount_pct"),
    ("/v1/discount-approvals", _approval(discount_pct=True), "discount_pct"),
    ("/v1/discount-approvals", _approval(term_months=0), "term_months"),
    ("/v1/discount-approvals", _approval(term_months=121), "term_months"),
    ("/v1/discount-approvals", _approval(term_months="24"), "term_months"),
    ("/v1/discount-approvals", _approval(external_id="x" * 201), "external_id"),
    ("/v1/discount-approvals", _approval(external_id="has space"), "external_id"),
    ("/v1/discount-approvals", _approval(account_id="acme'; DROP TABLE accounts;--"), "account_id"),
    ("/v1/discount-approvals", {**_approval(), "status": "approved"}, "status"),
    ("/v1/discount-approvals", {"account_id": "acme"}, "discount_pct"),
    ("/v1/accounts/acme/notes", {"text": "x" * 2001, "external_id": "n-1"}, "text"),
    ("/v1/accounts/acme/notes", {"text": "", "external_id": "n-1"}, "text"),
    ("/v1/accounts/acme/notes", {"text": "bell\x07", "external_id": "n-1"}, "text"),
    ("/v1/accounts/bad%20id!/notes", {"text": "hi", "external_id": "n-1"}, "account_id"),
])
def test_bad_input_is_422_with_a_reason_never_a_500(client, home, path, body, field):
    got = client.post(path, json=body, headers=home.headers(**SALES))
    assert got.status_code == 422, got.text
    error = got.json()["error"]
    assert error["code"] == "invalid_request" and field in error["message"]
    assert "sqlite" not in got.text.lower() and str(home.config.home) not in got.text
    assert _store(client).count_approvals() == 0 and _store(client).count_notes() == 0


def test_bad_queries_and_bodies_are_422(client, home):
    headers = home.headers(**SALES)
    assert client.get("/v1/discount-approvals", headers=headers).status_code == 422  # neither filter
    both = client.get("/v1/discount-approvals", params={"account_id": "acme", "external_id": "a"}, headers=headers)
    assert both.status_code == 422
    not_json = client.post("/v1/discount-approvals", content=b"{nope",
                           headers={**headers, "content-type": "application/json"})
    assert not_json.status_code == 422 and not_json.json()["error"]["code"] == "invalid_request"
    assert client.get("/v1/accounts/" + "a" * 65, headers=headers).status_code == 422


def test_the_launcher_starts_a_loopback_process_and_stops_exactly_it(home):
    from examples.crm.launcher import start_crm, stop_crm

    server = start_crm(home.config.home)
    try:
        assert server.url.startswith("http://127.0.0.1:")
        run = home.config.home / "run"
        assert int((run / "crm.pid").read_text()) == server.pid
        process = psutil.Process(server.pid)
        assert process.pid != psutil.Process().pid and process.ppid() == psutil.Process().pid
        listening = [c.laddr for c in process.net_connections("inet") if c.status == psutil.CONN_LISTEN]
        assert listening and all(addr.ip == "127.0.0.1" for addr in listening)
        assert httpx.get(f"{server.url}/healthz", timeout=5).json() == {"status": "ok"}
        # the process verifies users with the home's own keys: a real call on behalf of a user works
        got = httpx.get(f"{server.url}/v1/accounts/acme", headers=home.headers(**SALES), timeout=5)
        assert got.status_code == 200 and got.json()["name"] == "Acme Corporation"
        assert start_crm(home.config.home).pid == server.pid  # starting again finds the running one
    finally:
        assert stop_crm(home.config.home) is True
    assert not psutil.pid_exists(server.pid)
    assert not (home.config.home / "run" / "crm.pid").exists() and not (home.config.home / "run" / "crm.url").exists()
    assert stop_crm(home.config.home) is False  # nothing left to stop


def test_citadel_up_starts_the_example_crm_when_configured_and_down_stops_it(tmp_path):
    """`tools.example_crm`: the launcher starts the CRM on loopback (its URL becomes `endpoints.crm`) and
    `citadel down` stops it, even with no cluster running; nothing is left behind."""
    import httpx
    import psutil

    from citadel.config import load_config
    from serving.ray.launcher import _start_example_crm, down

    config = load_config(environ={"CITADEL_ANSWER__CONFIRM": "false", "CITADEL_HOME": str(tmp_path / "home"), "CITADEL_TOOLS__EXAMPLE_CRM": "true"})
    url = _start_example_crm(config)
    assert url.startswith("http://127.0.0.1:") and httpx.get(f"{url}/healthz").status_code == 200
    # the users' token service started first, and the tools are pointed at it
    assert config.tools.token_service_url.startswith("http://127.0.0.1:")
    assert httpx.get(f"{config.tools.token_service_url}/.well-known/jwks.json").json()["keys"]
    pids = [int((tmp_path / "home" / "run" / f"{name}.pid").read_text()) for name in ("crm", "idp")]
    assert down(config) is False  # no cluster was running; the CRM and token service are stopped all the same
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
