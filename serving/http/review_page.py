"""The reviewer page at `/review` (DESIGN.md §10, issue 16 item 8): server-rendered HTML, no script,
no front-end build step.

**Signing in.** A person reaches the page through their organisation's portal (an SSO proxy), which
adds the same identity headers an API client sends: a service credential (`Authorization`) and a
signed user context (`x-citadel-user-context`). The first `GET /review` (or `GET /review/session`)
carrying them is verified like any API call (`services.access.caller`) and answered with a session
cookie; later requests need only the cookie. The admission middleware authenticates `/v1/` paths
only, so these routes authenticate themselves.

**The session cookie** (`citadel_review`: HttpOnly, SameSite=Strict, Path=/review, Secure when the
request came over https) is stateless: `v1.<payload>.<mac>`, the payload base64url JSON of service,
tenant, user, groups, expiry and a random CSRF token, the mac HMAC-SHA256 over the payload under a
32-byte key kept in the deployment's home (`<home>/secrets/review_session.key`, 0600, made on first
use, shared by every replica of the home; delete it to end every session). It lives until the user
context's own expiry or one hour, whichever is first; a tampered, expired or unreadable cookie is
refused (401). No credential ever travels in a URL, and the cookie is never logged.

**Deciding.** Each pending task (`services.approvals.review_items`) has a form that posts to
`/review/{approval_id}/decide` with the session's CSRF token; a post is refused (403, nothing
decided) without the cookie's session, with a missing or wrong token, or with an `Origin`/`Referer`
from another host. Edited fields are converted to the types the task lists (a bad number is the
422 page). The decision goes through `services.approvals.decide`, so the policy engine judges an
edit exactly as over the JSON API (a reviewer cannot exceed their limit); its refusals (403, 404,
409, 422) come back as the page with the message, never a 500. A decision ends in a redirect to
`/review?result=<code>&id=<approval_id>`, the code rendered from a fixed table (no free text in a
URL); a honeypot's message, which the reviewer must see at once, is rendered directly.

Every value placed in the HTML goes through `html.escape`; every response carries a strict
Content-Security-Policy (no script at all), `X-Frame-Options: DENY` and `Cache-Control: no-store`.
The routes are left out of the OpenAPI document: they are a page, not the API.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import html
import json
import logging
import math
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional
from urllib.parse import parse_qsl, quote, urlsplit

import jwt
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from citadel import regex
from citadel.errors import CitadelError, InvalidRequest, Unauthenticated, Unavailable
from citadel.identity.base import WatchedFile, locked, replace_secret_file, valid_name
from citadel.identity.credentials import ServiceIdentity
from citadel.types import Principal, validate_tenant_id
from serving.http.api import _run, _services
from serving.services.access import Caller

log = logging.getLogger(__name__)

PAGE_PATH = "/review"
COOKIE_NAME = "citadel_review"
COOKIE_VERSION = "v1"
MAC_CONTEXT = b"citadel-review-session.v1."  # domain separation: this key signs nothing else
SESSION_MAX_S = 3600
SESSION_KEY_FILE = "review_session.key"
SESSION_KEY_BYTES = 32
MAX_COOKIE_CHARS = 3800  # browsers keep about 4 KB per cookie, name and attributes included
MAX_FORM_FIELDS = 64
APPROVAL_ID_PATTERN = regex.compile("review_page.approval_id", r"[A-Za-z0-9._:-]{1,128}")
INTEGER = regex.compile("review_page.integer", r"[+-]?\d{1,18}")
EDIT_PREFIX = "edit."
EDIT_DECISIONS = frozenset({"edit_and_approve", "correct"})  # decisions that carry the edited fields

SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                               "frame-ancestors 'none'",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
    "referrer-policy": "same-origin",
    "x-content-type-options": "nosniff",
}

DECISION_LABELS = {"approve": "Approve", "edit_and_approve": "Save edits and approve", "reject": "Reject",
                   "correct": "Save correction", "request_info": "Request more information"}
# What the page says after a decision: `?result=<code>` picks one; nothing else from the URL is shown
# but an approval id that matches APPROVAL_ID_PATTERN.
RESULTS = {"approve": "Approved as proposed.",
           "edit_and_approve": "Your edits were saved and the request approved.",
           "reject": "Rejected. The requester will be told.",
           "correct": "Correction saved; the request runs every check again.",
           "request_info": "More information was requested."}
SIGN_IN_MESSAGE = ("Sign in through your organisation's portal to review requests: it opens this page "
                   "for you. (A link or bookmark to this page cannot sign you in.)")


# ---------------------------------------------------------------------- the session
@dataclass(frozen=True)
class ReviewSession:
    """Who is reviewing, until when, and the token every form of theirs must carry."""

    service: str
    tenant: str
    user: str
    groups: tuple[str, ...]
    expires_at: int
    csrf: str

    def caller(self) -> Caller:
        """The verified caller the session was made from (its service acting for this tenant only)."""
        return Caller(ServiceIdentity(self.service, False, frozenset({self.tenant})),
                      Principal(self.tenant, self.user, frozenset(self.groups)))


class SessionKeys:
    """The HMAC key of review sessions, kept in the home (made once, 0600; re-read when it changes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[Path, WatchedFile[bytes]] = {}

    def key(self, secrets_dir: Path) -> bytes:
        path = secrets_dir / SESSION_KEY_FILE
        if not path.exists():
            with locked(path):  # two replicas starting at once agree on one key
                if not path.exists():
                    replace_secret_file(path, secrets.token_bytes(SESSION_KEY_BYTES).hex() + "\n")
        with self._lock:
            watched = self._files.setdefault(path, WatchedFile(path, _read_key))
        try:
            return watched.get()
        except (OSError, ValueError) as error:
            log.error("review session key %s unusable: %s", path, error)
            raise Unavailable("review sessions are unavailable; see the server log",
                              code="session_key_unavailable") from None


def _read_key(path: Path) -> bytes:
    key = bytes.fromhex(path.read_text().strip())
    if len(key) < SESSION_KEY_BYTES:
        raise ValueError(f"under {SESSION_KEY_BYTES} bytes")
    return key


_KEYS = SessionKeys()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, MAC_CONTEXT + payload.encode("ascii"), hashlib.sha256).digest())


def encode_session(session: ReviewSession, key: bytes) -> str:
    payload = _b64(json.dumps({"svc": session.service, "t": session.tenant, "u": session.user,
                               "g": list(session.groups), "exp": session.expires_at, "csrf": session.csrf},
                              separators=(",", ":")).encode("utf-8"))
    return f"{COOKIE_VERSION}.{payload}.{_mac(key, payload)}"


def decode_session(value: str | None, key: bytes, now: float) -> ReviewSession:
    """The session a cookie holds; `Unauthenticated` unless it is ours, untouched, well-formed and
    not expired."""
    invalid = Unauthenticated("your review session is not valid; sign in again", code="invalid_session")
    if not value or len(value) > MAX_COOKIE_CHARS or not value.isascii() or value.count(".") != 2:
        raise invalid
    version, payload, mac = value.split(".")
    if version != COOKIE_VERSION or not hmac.compare_digest(mac.encode("ascii"), _mac(key, payload).encode("ascii")):
        raise invalid
    try:
        claims = json.loads(_unb64(payload))
        if not isinstance(claims["g"], list):
            raise TypeError("groups are a list")
        session = ReviewSession(claims["svc"], claims["t"], claims["u"], tuple(claims["g"]), claims["exp"],
                                claims["csrf"])
        validate_tenant_id(session.tenant)
    except (ValueError, KeyError, TypeError, binascii.Error, CitadelError):
        raise invalid from None
    names_ok = all(valid_name(v) for v in (session.service, session.user, session.csrf, *session.groups))
    if not names_ok or not isinstance(session.expires_at, int) or isinstance(session.expires_at, bool):
        raise invalid
    if now >= session.expires_at:
        raise Unauthenticated("your review session has expired; sign in again", code="session_expired")
    return session


def _context_expiry(user_context: str) -> int:
    """`exp` of a user context that was just verified (so reading it unverified is reading it verified)."""
    try:
        exp = jwt.decode(user_context, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        exp = None
    if not isinstance(exp, int) or isinstance(exp, bool):
        raise Unauthenticated("user context carries no expiry", code="invalid_user_context")
    return exp


def _clock(request: Request) -> Callable[[], float]:
    """The identity clock (the services' fake one in tests), so sessions and contexts age together."""
    return getattr(getattr(_services(request), "wiring", None), "clock", None) or time.time


def _has_identity_headers(request: Request) -> bool:
    return "authorization" in request.headers or "x-citadel-user-context" in request.headers


async def _sign_in(request: Request) -> ReviewSession:
    """A new session from the identity headers a trusted portal added (verified like any API call)."""
    services = _services(request)
    authorization = request.headers.get("authorization")
    user_context = request.headers.get("x-citadel-user-context")
    caller: Caller = await _run(request, services.access.caller, authorization, user_context)
    now = _clock(request)()
    expires_at = min(_context_expiry(user_context or ""), int(now) + SESSION_MAX_S)
    if expires_at <= now:
        raise Unauthenticated("your sign-in has expired; sign in again", code="expired_user_context")
    principal = caller.principal
    session = ReviewSession(caller.service.id, principal.tenant_id, principal.user_id, tuple(sorted(principal.groups)),
                            expires_at, secrets.token_urlsafe(32))
    log.info("review session for user %s of tenant %s (service %s)", principal.user_id, principal.tenant_id,
             caller.service.id)
    return session


async def _session_key(request: Request) -> bytes:
    secrets_dir = _services(request).config.secrets_dir
    return await _run(request, _KEYS.key, secrets_dir)


async def _current_session(request: Request) -> ReviewSession:
    key = await _session_key(request)
    return decode_session(request.cookies.get(COOKIE_NAME), key, _clock(request)())


def _set_cookie(request: Request, response: Response, session: ReviewSession, key: bytes) -> None:
    value = encode_session(session, key)
    if len(value) > MAX_COOKIE_CHARS:
        raise CitadelError("your identity carries too many groups for a browser session; ask your "
                           "administrator to narrow the groups your portal sends", code="session_too_large")
    max_age = max(1, session.expires_at - int(_clock(request)()))
    response.set_cookie(COOKIE_NAME, value, max_age=max_age, path=PAGE_PATH, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")


def _clear_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(COOKIE_NAME, path=PAGE_PATH, httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")


# ---------------------------------------------------------------------- HTML
def e(value: Any) -> str:
    """Every value placed in the page goes through here."""
    return html.escape("" if value is None else str(value), quote=True)


STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{background:#1d2430;color:#fff;padding:12px 24px;display:flex;justify-content:space-between;align-items:center}
header h1{font-size:18px;margin:0}header form{display:inline}
main{max-width:1100px;margin:0 auto;padding:16px 24px}
.flash{padding:10px 14px;border-radius:6px;margin:12px 0}.flash.ok{background:#e3f6e8;border:1px solid #7cc58f}
.flash.error{background:#fde8e8;border:1px solid #e39a9a}
.item{background:#fff;border:1px solid #d8dde5;border-radius:8px;padding:14px 18px;margin:16px 0}
.item h2{font-size:17px;margin:0 0 6px}.meta{color:#56606f;font-size:13px;margin:0 0 10px}
.badge{background:#fff2cc;border:1px solid #e0c46c;border-radius:4px;padding:0 5px;font-size:12px}
table.diff{border-collapse:collapse;margin:8px 0 12px;min-width:60%}
table.diff th,table.diff td{border:1px solid #d8dde5;padding:4px 10px;text-align:left;vertical-align:top}
table.diff tr.changed td{background:#fff8e0}table.diff tr.changed td.proposed{font-weight:600}
.evidence{margin:6px 0 12px;padding-left:20px}.evidence blockquote{margin:0;font-style:italic}
.evidence cite{display:block;color:#56606f;font-size:13px;font-style:normal}
form.decide fieldset{border:1px solid #d8dde5;border-radius:6px;margin:0 0 10px}
form.decide label{display:inline-block;margin:4px 16px 4px 0}
textarea{width:100%;min-height:48px;box-sizing:border-box}
.buttons button{margin-right:8px;padding:6px 12px}
"""


def _document(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<style>{STYLE}</style></head><body>{body}</body></html>')


def _html(content: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(content, status_code=status, headers=SECURITY_HEADERS)


def _message_page(title: str, message: str, status: int, detail: str | None = None) -> HTMLResponse:
    extra = f'<p class="detail">{e(detail)}</p>' if detail else ""
    body = (f'<header><h1>Citadel review</h1></header><main><h2 id="message-title">{e(title)}</h2>'
            f'<p id="message" class="flash error">{e(message)}</p>{extra}</main>')
    return _html(_document(title, body), status)


def _sign_in_page(request: Request, reason: CitadelError | None = None) -> HTMLResponse:
    detail = f"({reason.message})" if reason is not None else None
    response = _message_page("Sign in needed", SIGN_IN_MESSAGE, 401, detail)
    if COOKIE_NAME in request.cookies:
        _clear_cookie(request, response)
    return response


def _when(timestamp: Any) -> str:
    if not isinstance(timestamp, (int, float)) or isinstance(timestamp, bool) or not math.isfinite(timestamp):
        return ""
    try:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(timestamp))
    except (OverflowError, OSError, ValueError):
        return ""


def _input_for(approval_id: str, field: Mapping[str, Any]) -> str:
    name = str(field.get("field", ""))
    kind = field.get("type")
    value = field.get("value")
    shown = "" if value is None else (json.dumps(value) if isinstance(value, bool) else str(value))
    if kind == "integer":
        attrs = 'type="number" step="1" inputmode="numeric"'
    elif kind == "number":
        attrs = 'type="number" step="any" inputmode="decimal"'
    else:
        attrs = 'type="text"'
    return (f'<label>{e(name)} <input {attrs} class="edit" id="{e(f"edit-{approval_id}-{name}")}" '
            f'name="{e(EDIT_PREFIX + name)}" value="{e(shown)}"></label>')


def _item_html(item: Mapping[str, Any], csrf: str) -> str:
    approval_id = str(item.get("approval_id", ""))
    kind = item.get("kind", "approval")
    meta = [f'tool <code class="tool">{e(item.get("tool"))}</code>',
            f'requested by <span class="requester">{e(item.get("requester"))}</span>',
            f'<time class="created">{e(_when(item.get("created_at")))}</time>']
    if item.get("expire_at") is not None:
        meta.append(f'expires <time class="expires">{e(_when(item.get("expire_at")))}</time>')
    badges = [f'<span class="badge kind">{e(kind)}</span>']
    if item.get("escalated"):
        badges.append('<span class="badge escalated">escalated</span>')
    reason = f'<p class="reason">{e(item.get("reason"))}</p>' if item.get("reason") else ""

    rows = []
    for line in item.get("diff") or ():
        changed = bool(line.get("changed"))
        rows.append(f'<tr class="{"changed" if changed else "same"}" data-field="{e(line.get("field"))}">'
                    f'<td class="field">{e(line.get("field"))}</td><td class="current">{e(line.get("current"))}</td>'
                    f'<td class="proposed">{e(line.get("proposed"))}</td>'
                    f'<td class="mark">{"changed" if changed else ""}</td></tr>')
    diff = ('<table class="diff"><thead><tr><th>Field</th><th>Current</th><th>Proposed</th><th></th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>') if rows else '<p class="diff none">No fields to compare.</p>'

    quotes = [f'<li class="evidence-line"><blockquote class="quote">{e(line.get("quote"))}</blockquote>'
              f'<cite class="citation">{e(line.get("citation"))}</cite></li>'
              for line in list(item.get("evidence") or ())[:2]]
    evidence = (f'<h3>Evidence</h3><ol class="evidence">{"".join(quotes)}</ol>' if quotes
                else '<p class="evidence none">No evidence was recorded for this task.</p>')

    editable = list(item.get("editable") or ())
    inputs = (f'<fieldset class="edits"><legend>Edit before approving</legend>'
              f'{"".join(_input_for(approval_id, f) for f in editable)}</fieldset>') if editable else ""
    buttons = "".join(f'<button type="submit" name="decision" value="{e(d)}" class="decision decision-{e(d)}">'
                      f'{e(DECISION_LABELS.get(d, d))}</button>' for d in item.get("decisions") or ())
    # Enter in a field submits with the form's first button: a disabled one, so it submits nothing.
    buttons = '<button type="submit" disabled hidden tabindex="-1" aria-hidden="true"></button>' + buttons
    action = f"{PAGE_PATH}/{quote(approval_id, safe='')}/decide"
    form = (f'<form method="post" action="{e(action)}" class="decide">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">{inputs}'
            f'<label class="comment">Comment<textarea name="comment" maxlength="2000"></textarea></label>'
            f'<p class="buttons">{buttons}</p></form>')
    return (f'<section class="item" id="{e("item-" + approval_id)}" data-approval-id="{e(approval_id)}">'
            f'<h2 class="title">{e(item.get("title") or item.get("tool"))} {"".join(badges)}</h2>'
            f'<p class="meta">{" · ".join(meta)}</p>{reason}{diff}{evidence}{form}</section>')


def render_page(session: ReviewSession, items: list[Mapping[str, Any]], flash: str | None = None,
                flash_ok: bool = True) -> str:
    who = (f'<span id="who">{e(session.user)}</span> · <span id="tenant">{e(session.tenant)}</span> '
           f'<form method="post" action="{PAGE_PATH}/session/end"><input type="hidden" name="csrf" '
           f'value="{e(session.csrf)}"><button type="submit" id="sign-out">Sign out</button></form>')
    notice = (f'<p id="flash" class="flash {"ok" if flash_ok else "error"}" role="status">{e(flash)}</p>'
              if flash else "")
    listing = ("".join(_item_html(item, session.csrf) for item in items) if items
               else '<p id="empty">Nothing waiting for you.</p>')
    body = (f'<header><h1>Waiting for your review</h1><div class="session">{who}</div></header>'
            f'<main>{notice}<p class="count">{len(items)} pending</p>{listing}</main>')
    return _document("Citadel review", body)


# ---------------------------------------------------------------------- forms
def _same_origin(request: Request) -> bool:
    """A form post whose Origin (or, without one, Referer) names another host than the request's
    `Host` is refused; a post with neither relies on the CSRF token alone. Host and port are compared,
    not the scheme, so a proxy that ends TLS in front of the gateway (and keeps `Host`) still works."""
    host = request.headers.get("host", "").lower()
    origin, referer = request.headers.get("origin"), request.headers.get("referer")
    try:
        if origin is not None:
            return origin != "null" and urlsplit(origin).netloc.lower() == host
        if referer is not None:
            return urlsplit(referer).netloc.lower() == host
    except ValueError:  # not a URL at all (an unclosed IPv6 bracket)
        return False
    return True


async def _form(request: Request) -> dict[str, str]:
    """A url-encoded form body (already bounded by the admission middleware); the first of a repeated name."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        raise InvalidRequest("the page posts url-encoded forms only")
    body = await request.body()
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS,
                          errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise InvalidRequest("the form could not be read") from None
    found: dict[str, str] = {}
    for name, value in pairs:
        found.setdefault(name, value)
    return found


def _typed(name: str, kind: Any, text: str) -> Any:
    text = text.strip() if kind in ("number", "integer") else text
    if kind == "integer":
        if not INTEGER.fullmatch(text):
            raise InvalidRequest(f"{name} needs a whole number")
        return int(text)
    if kind == "number":
        if INTEGER.fullmatch(text):
            return int(text)
        try:
            value = float(text) if len(text) <= 64 else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise InvalidRequest(f"{name} needs a number")
        return value
    return text


def _edits(form: Mapping[str, str], item: Mapping[str, Any] | None) -> dict[str, Any]:
    """The edited fields, typed as the task lists them; without the task (no longer listed), every
    `edit.` field with a best guess, which the policy engine's schema then judges."""
    given = {name[len(EDIT_PREFIX):]: value for name, value in form.items() if name.startswith(EDIT_PREFIX)}
    if item is None:
        guessed: dict[str, Any] = {}
        for name, value in given.items():
            try:
                guessed[name] = _typed(name, "number", value)
            except InvalidRequest:
                guessed[name] = value
        return guessed
    edits: dict[str, Any] = {}
    for field in item.get("editable") or ():
        name = str(field.get("field"))
        if name in given:
            edits[name] = _typed(name, field.get("type"), given[name])
    return edits


# ---------------------------------------------------------------------- routes
def add_review_routes(app: FastAPI) -> None:
    @app.get(PAGE_PATH, include_in_schema=False)
    async def review_page(request: Request) -> Response:
        try:
            if _has_identity_headers(request):
                session, new = await _sign_in(request), True
            else:
                session, new = await _current_session(request), False
            flash = _result_message(request)
            response = await _page_response(request, session, flash, True, 200)
            if new:
                _set_cookie(request, response, session, await _session_key(request))
            return response
        except Unauthenticated as error:
            return _sign_in_page(request, error)
        except CitadelError as error:
            return _message_page("Review page unavailable", error.message, error.http_status)

    @app.get(f"{PAGE_PATH}/session", include_in_schema=False)
    async def sign_in(request: Request) -> Response:
        try:
            if not _has_identity_headers(request):
                return _sign_in_page(request)
            session = await _sign_in(request)
            response = RedirectResponse(PAGE_PATH, status_code=303, headers=SECURITY_HEADERS)
            _set_cookie(request, response, session, await _session_key(request))
            return response
        except Unauthenticated as error:
            return _sign_in_page(request, error)
        except CitadelError as error:
            return _message_page("Sign-in failed", error.message, error.http_status)

    @app.post(f"{PAGE_PATH}/session/end", include_in_schema=False)
    async def sign_out(request: Request) -> Response:
        try:
            session = await _current_session(request)
            refusal = await _refused_form(request, session)
            if isinstance(refusal, Response):
                return refusal
        except Unauthenticated as error:
            return _sign_in_page(request, error)
        except CitadelError as error:
            return _message_page("Sign-out failed", error.message, error.http_status)
        response = _message_page("Signed out", "You are signed out of the review page.", 200)
        _clear_cookie(request, response)
        return response

    @app.post(f"{PAGE_PATH}/{{approval_id}}/decide", include_in_schema=False)
    async def decide(request: Request, approval_id: str) -> Response:
        try:
            session = await _current_session(request)
        except Unauthenticated as error:
            return _sign_in_page(request, error)
        except CitadelError as error:
            return _message_page("Review page unavailable", error.message, error.http_status)
        try:
            form = await _refused_form(request, session)
            if isinstance(form, Response):
                return form
            return await _decide(request, session, approval_id, form)
        except Unauthenticated as error:
            return _sign_in_page(request, error)
        except CitadelError as error:
            return await _page_response(request, session, error.message, False, error.http_status)


async def _refused_form(request: Request, session: ReviewSession) -> dict[str, str] | Response:
    """The posted form, or the 403 page when it did not come from this session's page."""
    forged = _message_page("Request refused", "This form did not come from your review page, or it has "
                           "expired. Reload the review page and try again; nothing was changed.", 403)
    if not _same_origin(request):
        return forged
    form = await _form(request)
    token = form.get("csrf", "")
    if not hmac.compare_digest(token.encode("utf-8"), session.csrf.encode("utf-8")):
        return forged
    return form


async def _decide(request: Request, session: ReviewSession, approval_id: str, form: Mapping[str, str]) -> Response:
    services = _services(request)
    caller = session.caller()
    decision = form.get("decision", "")
    comment = form.get("comment", "")
    edits: Optional[dict[str, Any]] = None
    if decision in EDIT_DECISIONS:
        items = await _run(request, services.approvals.review_items, caller)
        item = next((i for i in items if i.get("approval_id") == approval_id), None)
        edits = _edits(form, item)
    result = await _run(request, services.approvals.decide, caller, approval_id, decision, edits, comment)
    message = result.get("message") if isinstance(result, Mapping) else None
    if message:  # a honeypot: the reviewer is told at once, whatever they decided
        return await _page_response(request, session, str(message), bool(result.get("caught")), 200)
    target = f"{PAGE_PATH}?result={quote(decision, safe='')}"
    if APPROVAL_ID_PATTERN.fullmatch(approval_id):
        target += f"&id={quote(approval_id, safe='')}"
    return RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)


def _result_message(request: Request) -> str | None:
    """The fixed message for `?result=`; the approval id only when it looks like one."""
    message = RESULTS.get(request.query_params.get("result", ""))
    if message is None:
        return None
    approval_id = request.query_params.get("id", "")
    return f"{message} (task {approval_id})" if APPROVAL_ID_PATTERN.fullmatch(approval_id) else message


async def _page_response(request: Request, session: ReviewSession, flash: str | None, flash_ok: bool,
                         status: int) -> HTMLResponse:
    services = _services(request)
    try:
        items = await _run(request, services.approvals.review_items, session.caller())
    except CitadelError as error:
        if status < 400:
            raise
        log.warning("review page listing failed after a refused decision: %s", error.code)
        items = []
    return _html(render_page(session, items, flash, flash_ok), status)
