"""Tools act as the user, never as a key Citadel holds (DESIGN.md §10).

The example CRM accepts only access tokens its users' token service (examples/idp) issued through an
OAuth 2.0 Token Exchange (RFC 8693): a context or token signed with the tools service's own HS256 key
is refused, whatever user it names. A run parked for an approval holds a delegation, not the user's
context; a user who lost access before the approved action resumes gets no write on the CRM, and the
run records the refusal.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import jwt
import pytest

from citadel.identity.context import sign_user_context
from citadel.identity.credentials import ALL_TENANTS
from citadel.identity.keys import current_service_key
from citadel.tools.caller import tool_caller, tools_credential
from examples.crm.__main__ import db_path
from examples.crm.launcher import start_crm, stop_crm
from examples.crm.store import CrmStore
from examples.idp.launcher import start_idp, stop_idp
from tests.integration.conftest import make_home
from tests.integration.test_api import client_for
from tests.integration.test_tool_calls import ScriptedPlanner

REPO = Path(__file__).resolve().parents[2]
SAM = {"tenant": "northwind", "user": "sam", "groups": ("sales",)}
DANA = {"tenant": "northwind", "user": "dana", "groups": ("deal-desk",)}
PROPOSAL = {"id": "s1", "ask": "propose the multi-year discount", "tool": "crm.create_discount_approval",
            "args": {"account_id": "acme", "discount_pct": 12, "term_months": 24}}
APPROVAL_BODY = {"account_id": "acme", "discount_pct": 12, "term_months": 24, "external_id": "forged:1"}
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"


@pytest.fixture
def deployment(tmp_path):
    """A home with the CRM's tools, its token service and the CRM on loopback (the default delegation)."""
    home = make_home(tmp_path / "home", CITADEL_TOOLS__REGISTRY_FILE=str(REPO / "examples" / "crm" / "tools.yaml"))
    assert home.config.tools.delegation == "token_exchange"  # the default, not a test setting
    root = Path(home.config.home)
    tool_caller(home.config, [ALL_TENANTS])  # the tools' credential exists before the servers read the home
    try:
        idp = start_idp(root)
        crm = start_crm(root)
        home.config.tools.token_service_url = idp.url
        home.config.tools.endpoints = {"crm": crm.url}
        yield home, idp, crm, CrmStore(db_path(root.resolve()))
    finally:
        stop_crm(root)
        stop_idp(root)


def _tools_key_and_token(home):
    tools = home.config.tools.service_id
    key = current_service_key(home.config.service_keys_path, tools, create=True)
    token = (Path(home.config.secrets_dir) / f"{tools}.token").read_text().strip()
    return key, token


def test_a_context_signed_with_the_tools_services_own_key_is_refused_by_the_crm(deployment):
    home, _, crm, records = deployment
    key, token = _tools_key_and_token(home)
    now = int(time.time())
    # The old way: the tools' credential plus a context the tools service signed for whoever it likes.
    context = sign_user_context(key, "northwind", "sam", ["sales"], 120, home.config.identity.audience, now)
    old = httpx.post(f"{crm.url}/v1/discount-approvals", json=APPROVAL_BODY, timeout=10,
                     headers={"authorization": f"Bearer {token}", "x-citadel-user-context": context})
    assert old.status_code in (401, 403), old.text
    # The same key dressed up as an access token for the CRM: still not one the token service issued.
    claims = {"sub": "sam", "tenant": "northwind", "groups": ["sales"], "aud": "crm", "iat": now, "exp": now + 120,
              "scope": "crm.create_discount_approval", "svc": key.service, "act": {"sub": key.service}}
    forged = jwt.encode(claims, key.secret_bytes, algorithm="HS256", headers={"kid": key.kid})
    again = httpx.post(f"{crm.url}/v1/discount-approvals", json=APPROVAL_BODY, timeout=10,
                       headers={"authorization": f"Bearer {forged}"})
    assert again.status_code in (401, 403), again.text
    assert records.count_approvals() == 0


def test_the_token_service_does_not_issue_for_a_user_the_tools_service_names(deployment):
    """Holding the tools' credential is not enough to act as anyone: the subject must be the user's own
    context, which the tools service cannot make (a context it signs itself is refused)."""
    home, idp, _, _ = deployment
    key, token = _tools_key_and_token(home)
    self_signed = sign_user_context(key, "northwind", "sam", ["sales"], 120, home.config.identity.audience,
                                    int(time.time()))
    form = {"grant_type": TOKEN_EXCHANGE, "subject_token": self_signed, "subject_token_type": JWT_TYPE,
            "audience": "crm", "scope": "crm.create_discount_approval"}
    refused = httpx.post(f"{idp.url}/token", data=form, auth=(home.config.tools.service_id, token), timeout=10)
    assert refused.status_code in (400, 401, 403), refused.text
    assert "access_token" not in refused.text


def test_a_user_who_lost_access_before_the_approved_action_resumes_gets_no_write(deployment):
    home, idp, _, records = deployment
    with client_for(home) as client:
        client.app.state.services.wiring.orchestrator.planner = ScriptedPlanner([PROPOSAL])
        conversation = client.post("/v1/conversations", headers=home.headers(**SAM)).json()["conversation_id"]
        posted = client.post(f"/v1/conversations/{conversation}/messages", headers=home.headers(**SAM),
                             json={"content": "Acme renews next month. Are they eligible for the multi-year discount? "
                                              "Propose 12% for 24 months."})
        assert posted.status_code == 202, posted.text
        run_id = posted.json()["run_id"]
        client.app.state.services.runs.wait_for_runs(60)
        assert client.get(f"/v1/runs/{run_id}", headers=home.headers(**SAM)).json()["status"] == "waiting"

        # Sam leaves the company while the action waits: the identity provider revokes Sam.
        revoked = httpx.post(f"{idp.url}/admin/revoke", json={"tenant": "northwind", "user": "sam"},
                             headers=home.admin_headers(), timeout=10)
        assert revoked.status_code == 200, revoked.text

        [pending] = client.get("/v1/approvals", headers=home.headers(**DANA)).json()["approvals"]
        approved = client.post(f"/v1/approvals/{pending['approval_id']}:decide", headers=home.headers(**DANA),
                               json={"decision": "approve"})
        assert approved.status_code == 200, approved.text
        client.app.state.services.runs.wait_for_runs(60)
        deadline = time.monotonic() + 30
        while client.get(f"/v1/runs/{run_id}", headers=home.headers(**SAM)).json()["status"] in ("waiting", "queued",
                                                                                                  "running"):
            assert time.monotonic() < deadline, "the approved run never finished"
            time.sleep(0.1)
        events = client.get(f"/v1/runs/{run_id}/events",
                            headers={**home.headers(**SAM), "accept": "application/json"}).json()
        client.app.state.services.runs.wait_for_runs(60)

    assert records.count_approvals() == 0  # no write on the CRM
    final = [e["data"] for e in events if e["type"] == "final"][-1]
    [action] = final["actions"]
    assert action["status"] == "failed" and action["error"] == "delegation_refused"


# ----------------------------------------------------------------------------- the token service's rules, in process

@pytest.fixture
def token_service(tmp_path):
    """The token service's own exchange logic over a fresh home, and a way to call it as the tools' client."""
    import base64

    from citadel.config import load_config
    from examples.idp.exchange import TokenService
    from examples.idp.keys import signing_key
    from tests.integration.tool_servers import user_context

    config = load_config(environ={"CITADEL_HOME": str(tmp_path / "home")})
    secret = tools_credential(config, [ALL_TENANTS])  # Citadel's client secret at the token service
    service = TokenService(config, signing_key(config))
    client = "Basic " + base64.b64encode(f"citadel-tools:{secret}".encode()).decode()

    def exchange(form: dict, authorization: str = client) -> dict:
        return service.exchange(authorization, {"grant_type": TOKEN_EXCHANGE, **form})

    sam = user_context(config, "northwind", "sam", ["sales"])
    return config, service, exchange, sam


def _delegate(exchange, subject: str, run_id: str = "run-1") -> str:
    return exchange({"subject_token": subject, "subject_token_type": JWT_TYPE, "requested_token_type": REFRESH,
                     "audience": "crm", "scope": "crm.add_note crm.get_account", "run_id": run_id})["access_token"]


REFRESH = "urn:ietf:params:oauth:token-type:refresh_token"


def test_a_delegation_yields_access_only_for_its_own_run_system_and_tools(token_service):
    from examples.idp.exchange import OAuthError

    _, _, exchange, sam = token_service
    delegation = _delegate(exchange, sam)
    use = {"subject_token": delegation, "subject_token_type": REFRESH, "audience": "crm", "run_id": "run-1"}
    issued = exchange({**use, "scope": "crm.add_note"})
    claims = jwt.decode(issued["access_token"], options={"verify_signature": False})
    assert (claims["sub"], claims["tenant"], claims["groups"], claims["aud"]) == ("sam", "northwind", ["sales"], "crm")
    assert claims["scope"] == "crm.add_note" and claims["act"] == {"sub": "citadel-tools"} and claims["run"] == "run-1"
    assert claims["exp"] - claims["iat"] <= 300 and issued["token_type"] == "Bearer"
    for wrong in ({"run_id": "run-2"}, {"scope": "crm.create_discount_approval"}, {"audience": "erp"},
                  {"requested_token_type": REFRESH}):
        with pytest.raises(OAuthError):
            exchange({**use, "scope": "crm.add_note", **wrong})
    # an access token is not a delegation, and a delegation is not a user's context
    with pytest.raises(OAuthError):
        exchange({**use, "subject_token": issued["access_token"], "scope": "crm.add_note"})
    with pytest.raises(OAuthError):
        exchange({"subject_token": delegation, "subject_token_type": JWT_TYPE, "audience": "crm",
                  "scope": "crm.add_note"})


def test_only_the_tools_client_with_its_credential_may_exchange(token_service):
    import base64

    from examples.idp.exchange import OAuthError

    config, _, exchange, sam = token_service
    for authorization in (None, "Bearer nope", "Basic " + base64.b64encode(b"citadel-tools:wrong").decode(),
                          "Basic !!!"):
        with pytest.raises(OAuthError) as refused:
            _delegate(lambda form: exchange(form, authorization), sam)
        assert refused.value.status == 401 and refused.value.error == "invalid_client"


def test_a_revoked_user_gets_nothing_from_an_earlier_delegation(token_service):
    from examples.idp import users
    from examples.idp.exchange import OAuthError

    config, _, exchange, sam = token_service
    delegation = _delegate(exchange, sam)
    users.revoke(Path(config.home), "northwind", "sam")
    with pytest.raises(OAuthError) as refused:
        exchange({"subject_token": delegation, "subject_token_type": REFRESH, "audience": "crm",
                  "run_id": "run-1", "scope": "crm.add_note"})
    assert refused.value.error == "invalid_grant"
    with pytest.raises(OAuthError):
        _delegate(exchange, sam)  # nor a new one
    users.restore(Path(config.home), "northwind", "sam")
    assert _delegate(exchange, sam)


def test_the_hs256_path_is_a_named_local_test_mode_only(tmp_path):
    """`local_test_hs256` must be chosen by name: the default CRM refuses what it sends."""
    from citadel.config import load_config
    from citadel.tools.caller import LocalTestHs256Caller, TokenExchangeCaller
    from citadel.types import Principal
    from examples.crm.server import create_app, verifier_from_config
    from examples.idp.keys import publish_jwks, signing_key
    from fastapi.testclient import TestClient

    default = load_config(environ={"CITADEL_HOME": str(tmp_path / "home")})
    assert isinstance(tool_caller(default, [ALL_TENANTS]), TokenExchangeCaller)
    test_only = load_config(environ={"CITADEL_HOME": str(tmp_path / "home"),
                                     "CITADEL_TOOLS__DELEGATION": "local_test_hs256"})
    caller = tool_caller(test_only, [ALL_TENANTS])
    assert isinstance(caller, LocalTestHs256Caller)
    headers = caller.headers(Principal("northwind", "sam", frozenset({"sales"})), "crm.get_account", "crm", "run-1")
    publish_jwks(default.home, signing_key(default))
    for config, status in ((test_only, 200), (default, 401)):
        app = create_app(Path(config.home) / "crm" / "crm.sqlite", verifier_from_config(config))
        with TestClient(app) as client:
            assert client.get("/v1/accounts/acme", headers=headers).status_code == status
        app.state.store.close()
