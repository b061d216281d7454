"""The reviewer page's routes: `GET /review`, `GET /review/session`, `POST /review/session/end` and
`POST /review/{approval_id}/decide`. Each answers with HTML (never the API's JSON errors), so a
gateway still starting, a refused sign-in or a refused decision is a page with its message."""

from __future__ import annotations

import hmac
import logging
import time
from typing import Annotated, Any, Callable, Mapping, Optional
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from citadel.errors import CitadelError, Unauthenticated
from serving.http.deps import runner_of, services_of
from serving.http.routers.review.forms import APPROVAL_ID_PATTERN, EDIT_DECISIONS, edits_of, read_form, same_origin
from serving.http.routers.review.rendering import (RESULTS, SECURITY_HEADERS, html_response, message_page,
                                                   render_page, sign_in_page)
from serving.http.routers.review.session import (COOKIE_NAME, PAGE_PATH, ReviewSession, SessionKeys, clear_cookie,
                                                 decode_session, has_identity_headers, new_session, set_cookie)
from serving.services.access import Caller
from serving.services.compose import Services

log = logging.getLogger(__name__)

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


class ReviewRequest:
    """One page request's view of the gateway: its services (found when first needed, so that a
    gateway still starting answers with a page), blocking work on the worker threads, the session
    keys (`app.state.review_keys`, made by create_api) and the identity clock (the services' fake one
    in tests, so sessions and contexts age together)."""

    def __init__(self, request: Request):
        self.request = request

    @property
    def services(self) -> Services:
        return services_of(self.request)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await runner_of(self.request, self.services)(fn, *args)

    def now(self) -> float:
        clock = getattr(getattr(self.services, "wiring", None), "clock", None) or time.time
        return clock()

    async def session_key(self) -> bytes:
        keys: SessionKeys = self.request.app.state.review_keys
        return await self.run(keys.key, self.services.config.secrets_dir)

    async def sign_in(self) -> ReviewSession:
        """A new session from the identity headers a trusted portal added (verified like any API call)."""
        headers = self.request.headers
        user_context = headers.get("x-citadel-user-context")
        caller: Caller = await self.run(self.services.access.caller, headers.get("authorization"), user_context)
        return new_session(caller, user_context or "", self.now())

    async def current_session(self) -> ReviewSession:
        key = await self.session_key()
        return decode_session(self.request.cookies.get(COOKIE_NAME), key, self.now())

    async def set_cookie(self, response: Response, session: ReviewSession) -> None:
        set_cookie(self.request, response, session, await self.session_key(), self.now())


async def review_request(request: Request) -> ReviewRequest:
    return ReviewRequest(request)  # not Depends(ReviewRequest): a sync dependency costs a thread hop


Page = Annotated[ReviewRequest, Depends(review_request)]


@router.get(PAGE_PATH)
async def review_page(page: Page) -> Response:
    request = page.request
    try:
        if has_identity_headers(request):
            session, new = await page.sign_in(), True
        else:
            session, new = await page.current_session(), False
        response = await page_response(page, session, result_message(request), True, 200)
        if new:
            await page.set_cookie(response, session)
        return response
    except Unauthenticated as error:
        return sign_in_page(request, error)
    except CitadelError as error:
        return message_page("Review page unavailable", error.message, error.http_status)


@router.get(f"{PAGE_PATH}/session")
async def sign_in(page: Page) -> Response:
    request = page.request
    try:
        if not has_identity_headers(request):
            return sign_in_page(request)
        session = await page.sign_in()
        response = RedirectResponse(PAGE_PATH, status_code=303, headers=SECURITY_HEADERS)
        await page.set_cookie(response, session)
        return response
    except Unauthenticated as error:
        return sign_in_page(request, error)
    except CitadelError as error:
        return message_page("Sign-in failed", error.message, error.http_status)


@router.post(f"{PAGE_PATH}/session/end")
async def sign_out(page: Page) -> Response:
    request = page.request
    try:
        session = await page.current_session()
        refusal = await refused_form(request, session)
        if isinstance(refusal, Response):
            return refusal
    except Unauthenticated as error:
        return sign_in_page(request, error)
    except CitadelError as error:
        return message_page("Sign-out failed", error.message, error.http_status)
    response = message_page("Signed out", "You are signed out of the review page.", 200)
    clear_cookie(request, response)
    return response


@router.post(f"{PAGE_PATH}/{{approval_id}}/decide")
async def decide(approval_id: str, page: Page) -> Response:
    request = page.request
    try:
        session = await page.current_session()
    except Unauthenticated as error:
        return sign_in_page(request, error)
    except CitadelError as error:
        return message_page("Review page unavailable", error.message, error.http_status)
    try:
        form = await refused_form(request, session)
        if isinstance(form, Response):
            return form
        return await decided(page, session, approval_id, form)
    except Unauthenticated as error:
        return sign_in_page(request, error)
    except CitadelError as error:
        return await page_response(page, session, error.message, False, error.http_status)


async def refused_form(request: Request, session: ReviewSession) -> dict[str, str] | Response:
    """The posted form, or the 403 page when it did not come from this session's page."""
    forged = message_page("Request refused", "This form did not come from your review page, or it has "
                          "expired. Reload the review page and try again; nothing was changed.", 403)
    if not same_origin(request):
        return forged
    form = await read_form(request)
    token = form.get("csrf", "")
    if not hmac.compare_digest(token.encode("utf-8"), session.csrf.encode("utf-8")):
        return forged
    return form


async def decided(page: ReviewRequest, session: ReviewSession, approval_id: str, form: Mapping[str, str]) -> Response:
    """The decision through the approvals service (the policy engine judges an edit as over the JSON
    API), then a redirect to the page with a fixed result code; a honeypot's message at once."""
    approvals = page.services.approvals
    caller = session.caller()
    decision = form.get("decision", "")
    comment = form.get("comment", "")
    edits: Optional[dict[str, Any]] = None
    if decision in EDIT_DECISIONS:
        items = await page.run(approvals.review_items, caller)
        item = next((i for i in items if i.get("approval_id") == approval_id), None)
        edits = edits_of(form, item)
    result = await page.run(approvals.decide, caller, approval_id, decision, edits, comment)
    message = result.get("message") if isinstance(result, Mapping) else None
    if message:  # a honeypot: the reviewer is told at once, whatever they decided
        return await page_response(page, session, str(message), bool(result.get("caught")), 200)
    target = f"{PAGE_PATH}?result={quote(decision, safe='')}"
    if APPROVAL_ID_PATTERN.fullmatch(approval_id):
        target += f"&id={quote(approval_id, safe='')}"
    return RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)


def result_message(request: Request) -> str | None:
    """The fixed message for `?result=`; the approval id only when it looks like one."""
    message = RESULTS.get(request.query_params.get("result", ""))
    if message is None:
        return None
    approval_id = request.query_params.get("id", "")
    return f"{message} (task {approval_id})" if APPROVAL_ID_PATTERN.fullmatch(approval_id) else message


async def page_response(page: ReviewRequest, session: ReviewSession, flash: str | None, flash_ok: bool,
                        status: int) -> HTMLResponse:
    try:
        items = await page.run(page.services.approvals.review_items, session.caller())
    except CitadelError as error:
        if status < 400:
            raise
        log.warning("review page listing failed after a refused decision: %s", error.code)
        items = []
    return html_response(render_page(session, items, flash, flash_ok), status)
