"""The reviewer page at /review through FastAPI's TestClient: a session cookie made
from a verified user context (HttpOnly, SameSite=Strict, no credential in any URL), CSRF-protected
forms, the policy engine's refusals shown as pages (never a 500), and every value escaped.

The browser test (tests/browser/test_review_browser.py) drives the same page in headless Chromium."""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import urlsplit

import pytest

from serving.http.routers.review.rendering import SECURITY_HEADERS
from serving.http.routers.review.session import COOKIE_NAME
from tests.integration.test_approvals_api import DANA, SAM, clock, deployment, start_run  # noqa: F401 (fixtures)

HTML = "text/html"


def sign_in(client, home, who=DANA, now=None):
    """The portal's first request: identity headers on GET /review; the cookie then carries the session."""
    response = client.get("/review", headers=home.headers(**who, now=now))
    assert response.status_code == 200, response.text
    assert client.cookies.get(COOKIE_NAME)
    return response


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


def pending_id(client, home) -> str:
    [pending] = client.get("/v1/approvals", headers=home.headers(**DANA)).json()["approvals"]
    return pending["approval_id"]


def still_pending(client, home, approval_id: str) -> bool:
    pending = client.get("/v1/approvals", headers=home.headers(**DANA)).json()["approvals"]
    return approval_id in {a["approval_id"] for a in pending}


def form(csrf: str | None, decision: str, **edits) -> dict:
    body = {"decision": decision, "comment": "from the page"}
    if csrf is not None:
        body["csrf"] = csrf
    body.update({f"edit.{name}": str(value) for name, value in edits.items()})
    return body


def assert_secured(response) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, name
    assert "script-src" not in response.headers["content-security-policy"]  # default-src 'none': no script


@pytest.fixture
def reviewing(deployment):  # noqa: F811 (the fixture imported above)
    home, client, crm = deployment
    start_run(client, home)
    return home, client, crm, pending_id(client, home)


def test_without_a_session_the_page_asks_to_sign_in_through_the_portal(reviewing):
    home, client, crm, approval_id = reviewing
    response = client.get("/review")
    assert response.status_code == 401 and response.headers["content-type"].startswith(HTML)
    assert "organisation&#x27;s portal" in response.text
    assert_secured(response)
    assert COOKIE_NAME not in response.headers.get("set-cookie", "")
    posted = client.post(f"/review/{approval_id}/decide", data=form("x", "approve"))
    assert posted.status_code == 401 and still_pending(client, home, approval_id)
    wrong = client.get("/review", headers={**home.headers(**DANA), "authorization": "Bearer nope"})
    assert wrong.status_code == 401 and not client.cookies.get(COOKIE_NAME)


def test_signing_in_sets_an_httponly_strict_cookie_and_no_credential_travels_in_a_url(reviewing, clock):  # noqa: F811
    home, client, crm, approval_id = reviewing
    headers = home.headers(**DANA, now=clock.now)
    response = client.get("/review", headers=headers)
    assert response.status_code == 200, response.text
    assert_secured(response)
    cookie = response.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert cookie.startswith(f"{COOKIE_NAME}=") and {"httponly", "samesite", "path", "max-age"} <= attributes
    assert re.search(r"samesite=strict", cookie, re.I) and re.search(r"path=/review(;|$)", cookie, re.I)
    assert "secure" not in attributes  # plain http here; https responses add Secure
    # the session lives no longer than the user context (300 s in these tests)
    assert 0 < int(re.search(r"max-age=(\d+)", cookie, re.I).group(1)) <= 300
    # no credential, token or cookie value in any URL of the page (links, form actions)
    token = headers["authorization"].split()[1]
    secrets_ = [token, headers["x-citadel-user-context"], client.cookies.get(COOKIE_NAME)]
    urls = re.findall(r'(?:href|action|src)="([^"]*)"', response.text)
    assert urls and all(s not in url for s in secrets_ for url in urls)
    assert all(s not in response.text for s in secrets_)
    assert all(not urlsplit(url).query for url in urls)
    # the cookie alone carries the session from now on
    again = client.get("/review")
    assert again.status_code == 200 and f'id="item-{approval_id}"' in again.text
    # signed under a key kept in the home, readable by its owner only
    key_file = home.config.secrets_dir / "review_session.key"
    assert key_file.stat().st_mode & 0o777 == 0o600 and len(bytes.fromhex(key_file.read_text())) == 32
    # the cookie names who, not any credential
    payload = json.loads(base64.urlsafe_b64decode(client.cookies.get(COOKIE_NAME).split(".")[1] + "=="))
    assert payload["u"] == "dana" and payload["g"] == ["deal-desk"] and token not in json.dumps(payload)


def test_the_page_shows_the_task_with_its_diff_evidence_and_decisions(reviewing):
    home, client, crm, approval_id = reviewing
    page = sign_in(client, home).text
    assert f'id="item-{approval_id}"' in page
    assert 'data-field="discount_pct"' in page and 'data-field="term_months"' in page
    assert re.search(r'<td class="proposed">12</td>', page)
    assert 'name="edit.term_months"' in page and 'name="edit.discount_pct"' in page
    assert 'value="edit_and_approve"' in page and "Save edits and approve" in page
    assert 'value="approve"' in page and 'value="reject"' in page
    assert f'action="/review/{approval_id}/decide"' in page


def test_a_post_without_the_csrf_token_or_from_another_site_decides_nothing(reviewing):
    home, client, crm, approval_id = reviewing
    csrf = csrf_of(sign_in(client, home).text)
    decide = f"/review/{approval_id}/decide"
    for body, extra in [(form(None, "approve"), {}), (form("not-the-token", "approve"), {}),
                        (form(csrf[:-1], "approve"), {}),
                        (form(csrf, "approve"), {"origin": "https://evil.example"}),
                        (form(csrf, "approve"), {"origin": "null"}),
                        (form(csrf, "approve"), {"referer": "https://evil.example/review"})]:
        response = client.post(decide, data=body, headers=extra, follow_redirects=False)
        assert response.status_code == 403, (body, extra, response.text)
        assert "nothing was changed" in response.text
        assert_secured(response)
        assert still_pending(client, home, approval_id)
    assert crm.count_approvals("northwind") == 0
    # a token from another session is not this session's token
    other = client.get("/review", headers=home.headers(**{**DANA, "user": "dan"}))
    assert other.status_code == 200
    response = client.post(decide, data=form(csrf, "approve"), follow_redirects=False)  # the old token
    assert response.status_code == 403 and still_pending(client, home, approval_id)


def test_a_tampered_or_expired_cookie_is_refused(reviewing, clock):  # noqa: F811
    home, client, crm, approval_id = reviewing
    page = sign_in(client, home, now=clock.now).text
    csrf = csrf_of(page)
    good = client.cookies.get(COOKIE_NAME)
    version, payload, mac = good.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    forged_payload = base64.urlsafe_b64encode(json.dumps({**claims, "g": ["sales-directors"]}).encode()).rstrip(b"=")
    for value in (f"{version}.{forged_payload.decode()}.{mac}", f"{version}.{payload}.{mac[:-2]}AA",
                  "v1.e30.AAAA", "garbage", good + "x"):
        client.cookies.clear()
        client.cookies.set(COOKIE_NAME, value, path="/review")
        response = client.get("/review")
        assert response.status_code == 401, value
        assert "organisation&#x27;s portal" in response.text
        posted = client.post(f"/review/{approval_id}/decide", data=form(csrf, "approve"), follow_redirects=False)
        assert posted.status_code == 401 and still_pending(client, home, approval_id)
    client.cookies.clear()
    client.cookies.set(COOKIE_NAME, good, path="/review")
    assert client.get("/review").status_code == 200
    clock.now += 301  # past the user context's expiry, so past the session's
    assert client.get("/review").status_code == 401
    posted = client.post(f"/review/{approval_id}/decide", data=form(csrf, "approve"), follow_redirects=False)
    assert posted.status_code == 401 and still_pending(client, home, approval_id)


def test_a_reviewer_cannot_exceed_the_limit_but_may_edit_the_term_and_approve(reviewing):
    home, client, crm, approval_id = reviewing
    csrf = csrf_of(sign_in(client, home).text)
    decide = f"/review/{approval_id}/decide"
    too_much = client.post(decide, data=form(csrf, "edit_and_approve", discount_pct=20, term_months=24),
                           follow_redirects=False)
    assert too_much.status_code == 403, too_much.text
    assert re.search(r'id="flash" class="flash error"[^>]*>[^<]*15', too_much.text), too_much.text
    assert f'id="item-{approval_id}"' in too_much.text and still_pending(client, home, approval_id)
    assert_secured(too_much)

    bad = client.post(decide, data=form(csrf, "edit_and_approve", discount_pct=12, term_months="forever"),
                      follow_redirects=False)
    assert bad.status_code == 422 and "term_months needs a whole number" in bad.text
    assert still_pending(client, home, approval_id)

    done = client.post(decide, data=form(csrf, "edit_and_approve", discount_pct=12, term_months=36),
                       headers={"origin": "http://testserver"}, follow_redirects=False)
    assert done.status_code == 303, done.text
    assert done.headers["location"] == f"/review?result=edit_and_approve&id={approval_id}"
    assert_secured(done)
    after = client.get(done.headers["location"])
    assert "Your edits were saved and the request approved." in after.text
    assert "Nothing waiting for you." in after.text
    [approved] = client.get("/v1/approvals", headers=home.headers(**DANA),
                            params={"status": "approved"}).json()["approvals"]
    assert approved["approval_id"] == approval_id and approved["decided_by"] == "dana"
    assert approved["final_args"] == {"account_id": "acme", "discount_pct": 12, "term_months": 36}
    assert approved["comment"] == "from the page"

    again = client.post(decide, data=form(csrf, "reject"), follow_redirects=False)
    assert again.status_code == 409 and 'class="flash error"' in again.text
    unknown = client.post("/review/nope/decide", data=form(csrf, "reject"), follow_redirects=False)
    assert unknown.status_code == 404 and 'class="flash error"' in unknown.text


def test_a_non_member_sees_nothing_and_cannot_decide(reviewing):
    home, client, crm, approval_id = reviewing
    page = sign_in(client, home, who=SAM).text
    assert "Nothing waiting for you." in page and approval_id not in page
    response = client.post(f"/review/{approval_id}/decide", data=form(csrf_of(page), "approve"),
                           follow_redirects=False)
    assert response.status_code == 403 and still_pending(client, home, approval_id)


def test_hostile_strings_are_escaped_everywhere(reviewing, monkeypatch):
    home, client, crm, approval_id = reviewing
    hostile = '<script>alert(1)</script>"\'><img src=x onerror=alert(2)>'
    item = {"approval_id": approval_id, "kind": "review", "tool": hostile, "reason": hostile, "title": hostile,
            "requester": hostile, "created_at": 1_700_000_000.0, "escalated": True, "expire_at": None,
            "proposed_args": {hostile: hostile},
            "diff": [{"field": hostile, "current": hostile, "proposed": hostile, "changed": True}],
            "evidence": [{"quote": hostile, "citation": hostile}, {"quote": "fine", "citation": hostile}],
            "decisions": ["correct", "request_info", hostile],
            "editable": [{"field": hostile, "type": "string", "value": hostile}]}
    monkeypatch.setattr(client.app.state.services.approvals, "review_items", lambda caller: [item])
    page = sign_in(client, home).text
    assert "<script" not in page and "<img" not in page  # no tag of theirs, in text or in an attribute
    assert '"\'>' not in page and "&quot;&#x27;&gt;&lt;img" in page  # no attribute broken out of
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("&lt;script&gt;") >= 10
    assert "Save correction" in page and "Request more information" in page
    # nothing from the query string is shown but the fixed messages and an id that looks like one
    shown = client.get("/review", params={"result": hostile, "id": hostile}).text
    assert "<script" not in shown and "&lt;script" in shown  # only the item's own escaped values
    shown = client.get("/review", params={"result": "reject", "id": hostile}).text
    assert "Rejected. The requester will be told." in shown and "(task" not in shown


def test_a_decision_that_is_not_url_encoded_is_refused_without_a_500(reviewing):
    home, client, crm, approval_id = reviewing
    csrf = csrf_of(sign_in(client, home).text)
    response = client.post(f"/review/{approval_id}/decide", content=json.dumps(form(csrf, "approve")),
                           headers={"content-type": "application/json"}, follow_redirects=False)
    assert response.status_code == 422 and still_pending(client, home, approval_id)
    response = client.post(f"/review/{approval_id}/decide", content=b"csrf=%ff%fe&decision=approve",
                           headers={"content-type": "application/x-www-form-urlencoded"}, follow_redirects=False)
    assert response.status_code == 422 and still_pending(client, home, approval_id)


def test_signing_out_clears_the_cookie(reviewing):
    home, client, crm, approval_id = reviewing
    csrf = csrf_of(sign_in(client, home).text)
    assert client.post("/review/session/end", data={"csrf": "wrong"}).status_code == 403
    response = client.post("/review/session/end", data={"csrf": csrf})
    assert response.status_code == 200 and "signed out" in response.text
    assert not client.cookies.get(COOKIE_NAME)
    assert client.get("/review").status_code == 401


def test_the_review_routes_are_not_in_the_openapi_document(reviewing):
    home, client, crm, approval_id = reviewing
    assert not [path for path in client.get("/openapi.json").json()["paths"] if path.startswith("/review")]


def test_approving_a_planted_wrong_request_on_the_page_says_so_at_once(reviewing):
    from tests.integration.test_approvals_api import plant

    home, client, crm, approval_id = reviewing
    honeypot_id = plant(client.app.state.services, approval_id)
    page = sign_in(client, home).text
    assert f'id="item-{honeypot_id}"' in page and "honeypot" not in page.lower()  # looks like any request
    missed = client.post(f"/review/{honeypot_id}/decide", data=form(csrf_of(page), "approve"), follow_redirects=False)
    assert missed.status_code == 200, missed.text
    assert re.search(r'id="flash" class="flash error"[^>]*>This was a deliberately wrong test request', missed.text)
    assert f'id="item-{honeypot_id}"' not in missed.text and f'id="item-{approval_id}"' in missed.text
    assert crm.count_approvals("northwind") == 0
