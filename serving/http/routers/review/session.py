"""Who is reviewing: the stateless session cookie (`v1.<payload>.<mac>`), its key in the home, and a
new session from a just-verified caller. See the package's docstring for the rules."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

import jwt
from fastapi import Request
from fastapi.responses import Response

from citadel.errors import CitadelError, Unauthenticated, Unavailable
from citadel.identity.base import WatchedFile, locked, replace_secret_file, valid_name
from citadel.identity.credentials import ServiceIdentity
from citadel.types import Principal, validate_tenant_id
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


def context_expiry(user_context: str) -> int:
    """`exp` of a user context that was just verified (so reading it unverified is reading it verified)."""
    try:
        exp = jwt.decode(user_context, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        exp = None
    if not isinstance(exp, int) or isinstance(exp, bool):
        raise Unauthenticated("user context carries no expiry", code="invalid_user_context")
    return exp


def new_session(caller: Caller, user_context: str, now: float) -> ReviewSession:
    """A session for a caller just verified from the identity headers a trusted portal added: until
    its user context's expiry or SESSION_MAX_S, whichever is first."""
    expires_at = min(context_expiry(user_context), int(now) + SESSION_MAX_S)
    if expires_at <= now:
        raise Unauthenticated("your sign-in has expired; sign in again", code="expired_user_context")
    principal = caller.principal
    session = ReviewSession(caller.service.id, principal.tenant_id, principal.user_id, tuple(sorted(principal.groups)),
                            expires_at, secrets.token_urlsafe(32))
    log.info("review session for user %s of tenant %s (service %s)", principal.user_id, principal.tenant_id,
             caller.service.id)
    return session


def has_identity_headers(request: Request) -> bool:
    return "authorization" in request.headers or "x-citadel-user-context" in request.headers


def set_cookie(request: Request, response: Response, session: ReviewSession, key: bytes, now: float) -> None:
    value = encode_session(session, key)
    if len(value) > MAX_COOKIE_CHARS:
        raise CitadelError("your identity carries too many groups for a browser session; ask your "
                           "administrator to narrow the groups your portal sends", code="session_too_large")
    max_age = max(1, session.expires_at - int(now))
    response.set_cookie(COOKIE_NAME, value, max_age=max_age, path=PAGE_PATH, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")


def clear_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(COOKIE_NAME, path=PAGE_PATH, httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")
