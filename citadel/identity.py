"""Who is calling: service bearer credentials plus a signed, short-lived user context (DESIGN.md §4.1).

The gateway trusts nothing about tenant, user or groups from a request body. A calling service proves
itself with a bearer token (stored only as SHA-256), and vouches for its end user with a compact
HMAC-SHA256 token `base64url(payload).base64url(mac)` that is bound to that service (`svc`), to this
deployment (`aud`) and to a short lifetime. Every check fails closed with `Unauthenticated` and a
stable `code` so clients can tell "refresh your token" from "fix your integration".
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import tempfile
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from pydantic import ValidationError

from citadel.config import CitadelConfig, ServiceCredential
from citadel.errors import CitadelError
from citadel.types import Principal

AUTHORIZATION = "authorization"
USER_CONTEXT_HEADER = "x-citadel-user-context"
BEARER_SCHEME = "bearer"
SIGNING_KEY_ENV = "CITADEL_SIGNING_KEY"

TOKEN_BYTES = 32  # entropy of a generated bearer token (secrets.token_urlsafe)
SIGNING_KEY_BYTES = 32  # generated key size = HMAC-SHA256 block-safe, full-strength key
MIN_SIGNING_KEY_BYTES = 32  # a shorter (e.g. hand-typed env) key is refused rather than weakly used
MAX_NAME_CHARS = 256  # tenant, user, group, service and jti values
MAX_GROUPS = 1024  # a context carrying more is a bug or an attack, not an org chart
MAX_CREDENTIAL_CHARS = 4096  # bound work done on an unauthenticated header
MAX_USER_CONTEXT_CHARS = 64 * 1024  # bound decoding done before the signature is checked
FINGERPRINT_CHARS = 8  # how much of a hash `credentials list` may show
SECRET_FILE_MODE = 0o600
SECRET_DIR_MODE = 0o700


class Unauthenticated(CitadelError):
    """The caller or its user context could not be verified (HTTP 401)."""

    code = "unauthenticated"


class Forbidden(CitadelError):
    """Verified, but not allowed to do this (HTTP 403)."""

    code = "forbidden"


@dataclass(frozen=True)
class ServiceIdentity:
    """A verified calling service."""

    id: str
    admin: bool = False


def _valid_name(value: Any) -> bool:
    """Identifiers end up in logs, cache keys and SQL parameters: bounded, non-empty, no control
    chars, and encodable as UTF-8 (JSON can spell a lone surrogate, which nothing downstream can store)."""
    return (isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS
            and not any(unicodedata.category(ch) in ("Cc", "Cs") for ch in value))


def _sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------- secret files

def _ensure_secret_dir(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True, mode=SECRET_DIR_MODE)


def _write_secret_tmp(directory: Path, data: str) -> Path:
    """A fully written, fsynced 0600 temp file next to the target (so a rename/link is atomic)."""
    fd, name = tempfile.mkstemp(dir=directory, prefix=".tmp-")  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        os.unlink(name)
        raise
    return Path(name)


@contextlib.contextmanager
def _locked(path: Path):
    """Serialise read-modify-write of `path` so two concurrent `credentials add` both land."""
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# ----------------------------------------------------------------------------- service credentials

def read_credentials_file(path: Path) -> list[ServiceCredential]:
    """Hashed credentials from the JSON file; none if it does not exist. A corrupt file is an error."""
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
        return [ServiceCredential.model_validate(item) for item in data["services"]]
    except (ValueError, KeyError, TypeError, ValidationError) as error:
        raise CitadelError(f"{path}: not a valid credentials file ({error})",
                           code="invalid_credentials_file") from error


def add_credential(path: Path, service_id: str, admin: bool = False) -> str:
    """Create a bearer token for `service_id`, store only its hash, and return the plaintext once.

    An existing id keeps its other tokens, so a service can rotate without downtime.
    """
    if not _valid_name(service_id):
        raise ValueError(f"service id must be 1-{MAX_NAME_CHARS} characters without control characters")
    token = secrets.token_urlsafe(TOKEN_BYTES)
    _ensure_secret_dir(path.parent)
    with _locked(path):
        entries = read_credentials_file(path)
        entries.append(ServiceCredential(id=service_id, token_sha256=_sha256_hex(token), admin=admin))
        body = json.dumps({"services": [e.model_dump() for e in entries]}, indent=1) + "\n"
        os.replace(_write_secret_tmp(path.parent, body), path)
    return token


class CredentialStore:
    """Verifies `Authorization: Bearer <token>` against stored SHA-256 digests."""

    def __init__(self, credentials: Iterable[ServiceCredential]):
        self._entries = tuple((c.token_sha256.lower(), ServiceIdentity(c.id, c.admin)) for c in credentials)

    @classmethod
    def from_config(cls, config: CitadelConfig) -> CredentialStore:
        return cls([*config.identity.services, *read_credentials_file(config.credentials_path)])

    def authenticate(self, authorization_header: str | None) -> ServiceIdentity:
        if not authorization_header or not authorization_header.strip():
            raise Unauthenticated("an Authorization: Bearer credential is required", code="missing_credential")
        parts = authorization_header.strip().split(None, 1)
        if len(parts) != 2 or parts[0].lower() != BEARER_SCHEME or len(parts[1]) > MAX_CREDENTIAL_CHARS:
            raise Unauthenticated("the Authorization header must be 'Bearer <token>'", code="invalid_credential")
        digest = _sha256_hex(parts[1].strip())
        match = None
        for stored, identity in self._entries:  # no early exit: timing does not reveal which entry matched
            if hmac.compare_digest(stored, digest):
                match = identity
        if match is None:
            raise Unauthenticated("unknown service credential", code="invalid_credential")
        return match


# ----------------------------------------------------------------------------- signing key

def _decode_key(text: str, origin: str) -> bytes:
    try:
        key = bytes.fromhex(text.strip())
    except ValueError as error:
        raise CitadelError(f"{origin}: the signing key must be hex", code="invalid_signing_key") from error
    if len(key) < MIN_SIGNING_KEY_BYTES:
        raise CitadelError(f"{origin}: the signing key must be at least {MIN_SIGNING_KEY_BYTES} bytes",
                           code="invalid_signing_key")
    return key


def load_signing_key(path: Path) -> bytes:
    """The HMAC key for user contexts; absent is an error (a server never silently makes its own)."""
    if not path.exists():
        raise CitadelError(f"no signing key at {path}: create it (`citadel token` does on first use) "
                           f"or set {SIGNING_KEY_ENV}", code="signing_key_missing")
    return _decode_key(path.read_text(), str(path))


def load_or_create_signing_key(path: Path) -> bytes:
    """Load the key, or create it (0600, parent 0700). Concurrent creators agree on one key."""
    if path.exists():
        return load_signing_key(path)
    _ensure_secret_dir(path.parent)
    tmp = _write_secret_tmp(path.parent, secrets.token_bytes(SIGNING_KEY_BYTES).hex() + "\n")
    try:
        os.link(tmp, path)  # unlike rename, fails if another process won the race: keep theirs
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return load_signing_key(path)


def signing_key_from(config: CitadelConfig, environ: Mapping[str, str] | None = None, create: bool = False) -> bytes:
    """`CITADEL_SIGNING_KEY` (hex) if set, else the key file (created only when `create`)."""
    environ = os.environ if environ is None else environ
    if environ.get(SIGNING_KEY_ENV):
        return _decode_key(environ[SIGNING_KEY_ENV], SIGNING_KEY_ENV)
    path = config.signing_key_path
    return load_or_create_signing_key(path) if create else load_signing_key(path)


# ----------------------------------------------------------------------------- user context

def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    """Strict: only the canonical unpadded encoding decodes, so one token has exactly one spelling."""
    data = base64.urlsafe_b64decode(text.encode("ascii") + b"=" * (-len(text) % 4))
    if _b64encode(data) != text:
        raise ValueError("not canonical base64url")
    return data


def _mac(key: bytes, payload_segment: str) -> bytes:
    # The MAC covers the encoded segment exactly as sent, so no re-serialisation can change meaning.
    return hmac.new(key, payload_segment.encode("ascii"), hashlib.sha256).digest()


def sign_user_context(key: bytes, tenant: str, user: str, groups: Iterable[str], service_id: str,
                      ttl_s: int, audience: str, now: float, jti: str | None = None) -> str:
    """A compact signed user context the verifier below accepts from `service_id`."""
    groups = sorted(set(groups))
    values = [tenant, user, service_id, audience, *groups] + ([jti] if jti is not None else [])
    if not all(_valid_name(v) for v in values) or len(groups) > MAX_GROUPS:
        raise ValueError(f"names must be 1-{MAX_NAME_CHARS} characters without control characters, "
                         f"at most {MAX_GROUPS} groups")
    if ttl_s <= 0:
        raise ValueError("ttl_s must be positive")
    iat = int(now)
    payload = {"tenant": tenant, "sub": user, "groups": groups, "iat": iat, "exp": iat + int(ttl_s),
               "aud": audience, "svc": service_id}
    if jti is not None:
        payload["jti"] = jti
    segment = _b64encode(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode("utf-8"))
    return f"{segment}.{_b64encode(_mac(key, segment))}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class UserContextVerifier:
    """Checks signature, then lifetime, audience, binding to the caller, then claim shapes."""

    def __init__(self, key: bytes, audience: str, max_ttl_s: int, leeway_s: int,
                 clock: Callable[[], float] = time.time):
        if len(key) < MIN_SIGNING_KEY_BYTES:
            raise ValueError(f"signing key must be at least {MIN_SIGNING_KEY_BYTES} bytes")
        self._key, self.audience, self.max_ttl_s, self.leeway_s, self._clock = key, audience, max_ttl_s, leeway_s, clock

    def verify(self, token: str, caller: ServiceIdentity) -> Principal:
        claims = self._authentic_claims(token)
        self._check_times(claims)
        if claims.get("aud") != self.audience:
            raise Unauthenticated("user context is for another audience", code="wrong_audience")
        if claims.get("svc") != caller.id:
            raise Unauthenticated("user context was issued to another service", code="user_context_not_bound_to_caller")
        groups = claims.get("groups")
        valid = (_valid_name(claims.get("tenant")) and _valid_name(claims.get("sub")) and isinstance(groups, list)
                 and len(groups) <= MAX_GROUPS and all(_valid_name(g) for g in groups)
                 and ("jti" not in claims or _valid_name(claims["jti"])))
        if not valid:
            raise Unauthenticated("user context claims are missing or malformed", code="invalid_user_context")
        return Principal(claims["tenant"], claims["sub"], frozenset(groups))

    def _authentic_claims(self, token: str) -> dict:
        malformed = Unauthenticated("user context is not '<payload>.<signature>'", code="malformed_user_context")
        if not isinstance(token, str) or len(token) > MAX_USER_CONTEXT_CHARS or token.count(".") != 1:
            raise malformed
        segment, signature = token.split(".")
        if not segment or not signature:
            raise malformed
        try:
            mac = _b64decode(signature)
            payload = _b64decode(segment)
        except (binascii.Error, ValueError) as error:
            raise malformed from error
        if not hmac.compare_digest(mac, _mac(self._key, segment)):
            raise Unauthenticated("user context signature does not verify", code="invalid_signature")
        try:  # parsed only once authentic: untrusted JSON never reaches the parser
            claims = json.loads(payload)
        except ValueError as error:
            raise malformed from error
        if not isinstance(claims, dict):
            raise malformed
        return claims

    def _check_times(self, claims: dict) -> None:
        iat, exp, now = claims.get("iat"), claims.get("exp"), self._clock()
        if not (_is_int(iat) and _is_int(exp)) or exp <= iat:
            raise Unauthenticated("user context needs integer iat < exp", code="invalid_user_context")
        if now > exp + self.leeway_s:
            raise Unauthenticated("user context has expired", code="expired_user_context")
        if iat > now + self.leeway_s or exp - iat > self.max_ttl_s:
            raise Unauthenticated(f"user context issued in the future or living over {self.max_ttl_s}s",
                                  code="invalid_user_context")


# ----------------------------------------------------------------------------- facade

class Authenticator:
    """What the gateway calls per request: service credential first, then the user context bound to it."""

    def __init__(self, credentials: CredentialStore, verifier: UserContextVerifier):
        self.credentials, self.verifier = credentials, verifier

    @classmethod
    def from_config(cls, config: CitadelConfig, clock: Callable[[], float] = time.time,
                    environ: Mapping[str, str] | None = None) -> Authenticator:
        ident = config.identity
        verifier = UserContextVerifier(signing_key_from(config, environ), ident.audience, ident.max_ttl_s,
                                       ident.leeway_s, clock)
        return cls(CredentialStore.from_config(config), verifier)

    def authenticate(self, authorization: str | None, user_context: str | None) -> tuple[ServiceIdentity, Principal]:
        service = self.credentials.authenticate(authorization)
        if not user_context:
            raise Unauthenticated(f"the {USER_CONTEXT_HEADER} header is required", code="missing_user_context")
        return service, self.verifier.verify(user_context, service)

    def require_admin(self, authorization: str | None) -> ServiceIdentity:
        service = self.credentials.authenticate(authorization)
        if not service.admin:
            raise Forbidden(f"service {service.id!r} may not call admin endpoints", code="admin_required")
        return service
