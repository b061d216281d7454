"""The reviewer page's HTML: every value placed in it goes through `e` (html.escape); every response
carries SECURITY_HEADERS (a strict Content-Security-Policy: no script at all)."""

from __future__ import annotations

import html
import json
import math
import time
from typing import Any, Mapping
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import HTMLResponse

from citadel.errors import CitadelError
from serving.http.routers.review.forms import EDIT_PREFIX
from serving.http.routers.review.session import COOKIE_NAME, PAGE_PATH, ReviewSession, clear_cookie

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


def document(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<style>{STYLE}</style></head><body>{body}</body></html>')


def html_response(content: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(content, status_code=status, headers=SECURITY_HEADERS)


def message_page(title: str, message: str, status: int, detail: str | None = None) -> HTMLResponse:
    extra = f'<p class="detail">{e(detail)}</p>' if detail else ""
    body = (f'<header><h1>Citadel review</h1></header><main><h2 id="message-title">{e(title)}</h2>'
            f'<p id="message" class="flash error">{e(message)}</p>{extra}</main>')
    return html_response(document(title, body), status)


def sign_in_page(request: Request, reason: CitadelError | None = None) -> HTMLResponse:
    detail = f"({reason.message})" if reason is not None else None
    response = message_page("Sign in needed", SIGN_IN_MESSAGE, 401, detail)
    if COOKIE_NAME in request.cookies:
        clear_cookie(request, response)
    return response


def _when(timestamp: Any) -> str:
    if not isinstance(timestamp, (int, float)) or isinstance(timestamp, bool) or not math.isfinite(timestamp):
        return ""
    try:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(timestamp))
    except (OverflowError, OSError, ValueError):
        return ""


def _cited(line: Mapping[str, Any]) -> str:
    """An evidence line's citation, a link to the section it quotes (the sentence marked) when it has one."""
    label = e(line.get("citation"))
    url = line.get("url")
    return f'<a class="citation-link" href="{e(url)}">{label}</a>' if url else label


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
              f'<cite class="citation">{_cited(line)}</cite></li>'
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
    return document("Citadel review", body)
