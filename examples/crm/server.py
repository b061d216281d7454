"""The CRM's HTTP API (FastAPI). Every route but /healthz acts on behalf of a verified user.

Who is calling comes from an access token the users' token service issued for this system
(examples/idp, OAuth 2.0 Token Exchange; examples/crm/tokens.py): it names the user, tenant and
groups, and Citadel's tools service only as the actor (there is no service superuser). A write needs
the token's scope to name its tool. What the user may do here:
- records of another tenant do not exist for them (404, never 403, so ids cannot be probed);
- reading an account, its approvals or notes needs the account's owner group or `deal-desk`;
- writing (a note, a discount approval) needs the owner group: a user who can read the account but
  not write gets 403 `not_permitted`; one who cannot even read it gets the same 404 as a missing one.

Errors share Citadel's shape, `{"error": {"code", "message"}}`; none shows SQL, a path or a trace.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any, Optional, Protocol

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from citadel.config import CitadelConfig
from citadel.errors import CitadelError, Conflict, Forbidden, InvalidRequest, NotFound
from citadel.identity.context import USER_CONTEXT_HEADER
from citadel.types import Principal
from examples.crm.store import Account, CrmStore
from examples.crm.tokens import Grant, verifier_for

log = logging.getLogger(__name__)

DEAL_DESK = "deal-desk"  # reads every account of its tenant: it reviews discounts for all of them
ACCOUNT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# Idempotency keys derived by Citadel from run and step, e.g. `run_ab12:step-3`.
EXTERNAL_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$"
MAX_NOTE_CHARS = 2000


class UserVerifier(Protocol):
    """What create_app needs to know who is calling; Citadel's Authenticator is one."""

    def authenticate(self, authorization: str | None, user_context: str | None) -> tuple[Any, Principal]: ...


def verifier_from_config(config: CitadelConfig) -> UserVerifier:
    """The token service's access tokens (`tools.delegation: token_exchange`, the default), or, for
    local tests only, the home's service credentials and HS256 contexts (`local_test_hs256`)."""
    return verifier_for(config)


# ----------------------------------------------------------------------------- request bodies

class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoteRequest(_Body):
    text: str = Field(..., min_length=1, max_length=MAX_NOTE_CHARS)
    external_id: str = Field(..., pattern=EXTERNAL_ID_PATTERN)

    @field_validator("text")
    @classmethod
    def _printable(cls, value: str) -> str:
        if any(ord(c) < 32 and c not in "\n\t" for c in value):
            raise ValueError("text may hold no control characters other than newline and tab")
        return value


class DiscountApprovalRequest(_Body):
    account_id: str = Field(..., pattern=ACCOUNT_ID_PATTERN)
    # strict: a string, a boolean or 24.0 months is a caller's bug to report, not a value to coerce
    discount_pct: float = Field(..., ge=0, le=100, allow_inf_nan=False, strict=True)
    term_months: int = Field(..., ge=1, le=120, strict=True)
    external_id: str = Field(..., pattern=EXTERNAL_ID_PATTERN)


# ----------------------------------------------------------------------------- permission rules

def _readable(account: Account | None, user: Principal) -> Account:
    """The account if this user may read it; otherwise the same 404 as for a missing account."""
    if account is None or account.tenant_id != user.tenant_id or not (user.groups & {account.owner_group, DEAL_DESK}):
        raise NotFound("no such account", code="account_not_found")
    return account


def _writable(account: Account | None, user: Principal) -> Account:
    account = _readable(account, user)
    if account.owner_group not in user.groups:
        raise Forbidden(f"writing to this account needs membership of {account.owner_group!r}", code="not_permitted")
    return account


# ----------------------------------------------------------------------------- the app

def create_app(db_path: Path, verifier: UserVerifier) -> FastAPI:
    app = FastAPI(title="Example CRM", description="An external system Citadel's tools reach (examples/crm).")
    app.state.store = CrmStore(db_path)
    _add_error_handlers(app)

    def store(request: Request) -> CrmStore:
        return request.app.state.store

    def caller(authorization: Optional[str] = Header(None),
               user_context: Optional[str] = Header(None, alias=USER_CONTEXT_HEADER)) -> tuple[Any, Principal]:
        """401 before anything else runs (bad input included); the user comes only from the signed token."""
        return verifier.authenticate(authorization, user_context)

    def user(who: tuple[Any, Principal] = Depends(caller)) -> Principal:
        return who[1]

    def writer(tool: str):
        """A write's caller: the token must have been issued for this tool (its scope)."""
        def check(who: tuple[Any, Principal] = Depends(caller)) -> Principal:
            grant, principal = who
            if isinstance(grant, Grant) and tool not in grant.scopes:
                raise Forbidden(f"this token was not issued for {tool}", code="insufficient_scope")
            return principal
        return check

    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/v1/accounts/{account_id}")
    def get_account(account_id: str = PathParam(..., pattern=ACCOUNT_ID_PATTERN), me: Principal = Depends(user),
                    crm: CrmStore = Depends(store)) -> dict:
        return _readable(crm.get_account(me.tenant_id, account_id), me).to_dict()

    @app.get("/v1/accounts/{account_id}/discount")
    def current_discount(account_id: str = PathParam(..., pattern=ACCOUNT_ID_PATTERN), me: Principal = Depends(user),
                         crm: CrmStore = Depends(store)) -> dict:
        """The account's discount terms in force: its latest approval's, or none (0%, no term)."""
        _readable(crm.get_account(me.tenant_id, account_id), me)
        approvals = crm.list_approvals(me.tenant_id, account_id)
        latest = approvals[-1] if approvals else None
        return {"account_id": account_id, "discount_pct": latest.discount_pct if latest else 0,
                "term_months": latest.term_months if latest else None,
                "approval_id": latest.approval_id if latest else None}

    @app.post("/v1/accounts/{account_id}/notes")
    def add_note(body: NoteRequest, account_id: str = PathParam(..., pattern=ACCOUNT_ID_PATTERN),
                 me: Principal = Depends(writer("crm.add_note")), crm: CrmStore = Depends(store)) -> JSONResponse:
        _writable(crm.get_account(me.tenant_id, account_id), me)
        note, created = crm.add_note(me.tenant_id, account_id, body.text, me.user_id, body.external_id)
        if note.account_id != account_id:
            raise Conflict("external_id already names a note on another account", code="external_id_conflict")
        return JSONResponse(note.to_dict(), status_code=201 if created else 200)

    @app.post("/v1/discount-approvals")
    def create_discount_approval(body: DiscountApprovalRequest,
                                 me: Principal = Depends(writer("crm.create_discount_approval")),
                                 crm: CrmStore = Depends(store)) -> JSONResponse:
        """201 with a new record; 200 with the existing one, unchanged, when `external_id` is known."""
        _writable(crm.get_account(me.tenant_id, body.account_id), me)
        approval, created = crm.create_discount_approval(me.tenant_id, body.account_id, body.discount_pct,
                                                         body.term_months, me.user_id, body.external_id)
        if approval.account_id != body.account_id:  # never hand back a record of an account not checked above
            raise Conflict("external_id already names an approval for another account", code="external_id_conflict")
        return JSONResponse(approval.to_dict(), status_code=201 if created else 200)

    @app.get("/v1/discount-approvals")
    def find_discount_approvals(external_id: Optional[str] = Query(None, pattern=EXTERNAL_ID_PATTERN),
                                account_id: Optional[str] = Query(None, pattern=ACCOUNT_ID_PATTERN),
                                me: Principal = Depends(user), crm: CrmStore = Depends(store)) -> dict:
        """`?external_id=` → that record (404 when none); `?account_id=` → `{"approvals": [...]}`."""
        if (external_id is None) == (account_id is None):
            raise InvalidRequest("give exactly one of external_id and account_id", code="invalid_request")
        if external_id is not None:
            approval = crm.find_approval_by_external_id(me.tenant_id, external_id)
            if approval is None:
                raise NotFound("no approval with this external_id", code="approval_not_found")
            try:
                _readable(crm.get_account(me.tenant_id, approval.account_id), me)
            except NotFound:
                raise NotFound("no approval with this external_id", code="approval_not_found") from None
            return approval.to_dict()
        _readable(crm.get_account(me.tenant_id, account_id), me)
        return {"approvals": [a.to_dict() for a in crm.list_approvals(me.tenant_id, account_id)]}

    return app


def _error(code: str, message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(CitadelError)
    async def _known(request: Request, error: CitadelError):
        return _error(error.code, error.message, error.http_status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError):
        # location and pydantic's message only: the offending input is not echoed back
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in error.errors())
        return _error(InvalidRequest.code, problems or "invalid request", InvalidRequest.http_status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code)
        if code is None:  # an unparsable body is an invalid request like any other
            return _error(InvalidRequest.code, str(error.detail), InvalidRequest.http_status)
        return _error(code, str(error.detail), error.status_code)

    @app.exception_handler(sqlite3.OperationalError)
    async def _busy(request: Request, error: sqlite3.OperationalError):
        log.error("CRM store error in %s %s: %s", request.method, request.url.path, error)
        return _error("unavailable", "the CRM store is busy; retry", 503)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception):
        log.exception("unhandled error in %s %s", request.method, request.url.path)
        return _error("internal_error", "internal error; see the CRM's log", 500)
