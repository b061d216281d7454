"""The token service's HTTP API (FastAPI), over exchange.py:

- `POST /token`: RFC 8693 token exchange, `application/x-www-form-urlencoded`, client authentication
  by HTTP Basic; answers RFC 6749 §5.2 errors (`{"error", "error_description"}`, `no-store`).
- `GET /.well-known/jwks.json`: the public keys (the same as `<home>/idp/jwks.json`).
- `POST /admin/revoke` `{"tenant", "user"}`: a Citadel admin credential marks a user as gone.
- `GET /healthz`.

Every body is read with a size bound before it is parsed; no error shows a path, a key or a trace.
"""

from __future__ import annotations

import logging
import urllib.parse

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from citadel.identity.base import MAX_NAME_CHARS
from examples.idp.exchange import OAuthError, TokenService

log = logging.getLogger(__name__)

MAX_FORM_BYTES = 96 * 1024  # a subject token (at most 64 KiB) and a few short fields
MAX_FORM_FIELDS = 16
MAX_ADMIN_BYTES = 4096
NO_STORE = {"cache-control": "no-store", "pragma": "no-cache"}


class RevokeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(..., min_length=1, max_length=MAX_NAME_CHARS)
    user: str = Field(..., min_length=1, max_length=MAX_NAME_CHARS)


def create_app(service: TokenService, jwks: dict) -> FastAPI:
    app = FastAPI(title="Example token service", description="RFC 8693 token exchange for Citadel's tools "
                  "(examples/idp).", openapi_url=None)

    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/.well-known/jwks.json")
    def published_keys() -> dict:
        return jwks

    @app.post("/token")
    async def token(request: Request, authorization: str | None = Header(None)) -> JSONResponse:
        try:
            form = _form(await _bounded_body(request, MAX_FORM_BYTES), request.headers.get("content-type", ""))
            return JSONResponse(service.exchange(authorization, form), headers=NO_STORE)
        except OAuthError as error:
            return _oauth_error(error)
        except Exception:  # never a trace to the caller
            log.exception("token exchange failed")
            return _oauth_error(OAuthError("server_error", "the token service failed", 500))

    @app.post("/admin/revoke")
    async def revoke(request: Request, authorization: str | None = Header(None)) -> JSONResponse:
        try:
            body = RevokeRequest.model_validate_json(await _bounded_body(request, MAX_ADMIN_BYTES))
            service.revoke(authorization, body.tenant, body.user)
            return JSONResponse({"tenant": body.tenant, "user": body.user, "revoked": True})
        except ValidationError:
            return _oauth_error(OAuthError("invalid_request", "the body is {\"tenant\", \"user\"}"))
        except OAuthError as error:
            return _oauth_error(error)

    return app


async def _bounded_body(request: Request, limit: int) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise OAuthError("invalid_request", f"the body is over {limit:,} bytes", 413)
    return bytes(body)


def _form(body: bytes, content_type: str) -> dict[str, str]:
    """The form's fields, each named once (a repeated field is ambiguous, so it is refused)."""
    if content_type.split(";")[0].strip().lower() != "application/x-www-form-urlencoded":
        raise OAuthError("invalid_request", "send application/x-www-form-urlencoded")
    try:
        pairs = urllib.parse.parse_qsl(body.decode("utf-8"), strict_parsing=bool(body),
                                       max_num_fields=MAX_FORM_FIELDS)
    except (UnicodeDecodeError, ValueError):
        raise OAuthError("invalid_request", "the form cannot be parsed") from None
    form = dict(pairs)
    if len(form) != len(pairs):
        raise OAuthError("invalid_request", "a field is repeated")
    return form


def _oauth_error(error: OAuthError) -> JSONResponse:
    headers = dict(NO_STORE)
    if error.status == 401:
        headers["www-authenticate"] = 'Basic realm="token"'
    return JSONResponse({"error": error.error, "error_description": error.description}, status_code=error.status,
                        headers=headers)
