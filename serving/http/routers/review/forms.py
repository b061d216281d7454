"""What a reviewer's form posted: same-origin check, the url-encoded body, and edited fields typed as
the task lists them."""

from __future__ import annotations

import math
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlsplit

from fastapi import Request

from citadel import regex
from citadel.errors import InvalidRequest

MAX_FORM_FIELDS = 64
APPROVAL_ID_PATTERN = regex.compile("review_page.approval_id", r"[A-Za-z0-9._:-]{1,128}")
INTEGER = regex.compile("review_page.integer", r"[+-]?\d{1,18}")
EDIT_PREFIX = "edit."
EDIT_DECISIONS = frozenset({"edit_and_approve", "correct"})  # decisions that carry the edited fields

def same_origin(request: Request) -> bool:
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


async def read_form(request: Request) -> dict[str, str]:
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


def edits_of(form: Mapping[str, str], item: Mapping[str, Any] | None) -> dict[str, Any]:
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
