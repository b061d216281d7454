"""Service bearer credentials: who the calling service is, which tenants it may act for, whether it
is an admin (of those tenants, or of the platform with `["*"]`), and whether its token has expired
or been revoked.

Tokens are stored only as SHA-256 digests (a stolen file does not authenticate). The credentials file
is re-read when it changes, so `citadel credentials revoke` takes effect on a running gateway at its
next request. A revoked or expired credential is 401 with its own code, so a client can tell "you were
cut off" from "you mistyped the token".
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from pydantic import ValidationError

from citadel.config import CitadelConfig, ServiceCredential
from citadel.errors import CitadelError, InvalidTenant, Unauthenticated
from citadel.identity.base import (
    MAX_NAME_CHARS,
    WatchedFile,
    locked,
    replace_secret_file,
    sha256_hex,
    valid_name,
)
from citadel.types import validate_tenant_id

AUTHORIZATION = "authorization"
BEARER_SCHEME = "bearer"
ALL_TENANTS = "*"
TOKEN_BYTES = 32  # entropy of a generated bearer token (secrets.token_urlsafe)
MAX_CREDENTIAL_CHARS = 4096  # bound work done on an unauthenticated header
FINGERPRINT_CHARS = 8  # how much of a hash `credentials list` may show and `revoke --fingerprint` takes


def bearer_digest(authorization_header: str | None, max_chars: int = MAX_CREDENTIAL_CHARS) -> str:
    """SHA-256 (hex) of the token in `Authorization: Bearer <token>`, the form credentials are stored
    in; a missing or malformed header, or a token over `max_chars`, is `Unauthenticated`."""
    if not authorization_header or not authorization_header.strip():
        raise Unauthenticated("an Authorization: Bearer credential is required", code="missing_credential")
    parts = authorization_header.strip().split(None, 1)
    if len(parts) != 2 or parts[0].lower() != BEARER_SCHEME or len(parts[1]) > max_chars:
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'", code="invalid_credential")
    return sha256_hex(parts[1].strip())


@dataclass(frozen=True)
class ServiceIdentity:
    """A verified calling service and its scope."""

    id: str
    admin: bool = False
    tenants: frozenset[str] = field(default_factory=frozenset)

    @property
    def all_tenants(self) -> bool:
        return ALL_TENANTS in self.tenants

    @property
    def platform_admin(self) -> bool:
        """An admin of every tenant, given explicitly: the only one allowed platform-wide actions."""
        return self.admin and self.all_tenants

    def may_act_for(self, tenant_id: str) -> bool:
        return self.all_tenants or tenant_id in self.tenants


def fingerprint(credential: ServiceCredential) -> str:
    return credential.token_sha256[:FINGERPRINT_CHARS]


# ----------------------------------------------------------------------------- the file

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


def _write_credentials_file(path: Path, entries: list[ServiceCredential]) -> None:
    body = json.dumps({"services": [e.model_dump(exclude_none=True) for e in entries]}, indent=1) + "\n"
    replace_secret_file(path, body)


def add_credential(path: Path, service_id: str, tenants: Sequence[str], admin: bool = False,
                   expires_at: float | None = None) -> str:
    """Create a bearer token for `service_id` acting for `tenants` (`["*"]`: all), store only its
    hash, and return the plaintext once. An existing id keeps its other tokens, so a service can
    rotate without downtime (then revoke the old one by fingerprint)."""
    if not valid_name(service_id):
        raise ValueError(f"service id must be 1-{MAX_NAME_CHARS} characters without control characters")
    tenants = list(dict.fromkeys(tenants))
    if not tenants:
        raise ValueError("a credential acts for at least one tenant (or every tenant, given explicitly)")
    try:
        for tenant in tenants:
            if tenant != ALL_TENANTS:
                validate_tenant_id(tenant)
    except InvalidTenant as error:
        raise ValueError(str(error)) from None
    token = secrets.token_urlsafe(TOKEN_BYTES)
    try:
        entry = ServiceCredential(id=service_id, token_sha256=sha256_hex(token), tenants=tenants, admin=admin,
                                  expires_at=expires_at)
    except ValidationError as error:
        raise ValueError(str(error)) from None
    with locked(path):
        _write_credentials_file(path, [*read_credentials_file(path), entry])
    return token


def kept_token(path: Path, token_file: Path, service_id: str, tenants: Sequence[str], admin: bool = False) -> str:
    """The plaintext token of a credential this deployment keeps for itself in `token_file` (a secret
    file, mode 0600): the kept one while `service_id` still has a usable credential for exactly
    `tenants` (not revoked, no expiry), else a new credential whose token replaces the file's."""
    wanted = sorted(tenants)
    usable = any(c.id == service_id and sorted(c.tenants) == wanted and c.revoked_at is None and c.expires_at is None
                 for c in read_credentials_file(path))
    if usable and token_file.exists():
        return token_file.read_text().strip()
    token = add_credential(path, service_id, tenants, admin=admin)
    replace_secret_file(token_file, token)
    return token


def revoke_credentials(path: Path, service_id: str | None = None, fingerprint_prefix: str | None = None,
                       now: float | None = None) -> list[ServiceCredential]:
    """Mark the matching credentials of the file revoked (kept as a record) and return them.

    By service id: every token of that service. By fingerprint: exactly one token (ambiguity is an
    error, never a broader revocation than asked for)."""
    if service_id is None and not fingerprint_prefix:
        raise ValueError("name a service id or a fingerprint")
    now = time.time() if now is None else now
    with locked(path):
        entries = read_credentials_file(path)
        chosen = [i for i, e in enumerate(entries)
                  if (service_id is None or e.id == service_id)
                  and (not fingerprint_prefix or fingerprint(e) == fingerprint_prefix.lower())
                  and e.revoked_at is None]
        if fingerprint_prefix and len(chosen) > 1:
            raise ValueError(f"fingerprint {fingerprint_prefix!r} matches {len(chosen)} credentials; "
                             "name the service id too")
        for index in chosen:
            entries[index] = entries[index].model_copy(update={"revoked_at": now})
        if chosen:
            _write_credentials_file(path, entries)
    return [entries[i] for i in chosen]


# ----------------------------------------------------------------------------- verification

class CredentialStore:
    """Verifies `Authorization: Bearer <token>` against stored SHA-256 digests, then the entry's
    revocation and expiry."""

    def __init__(self, credentials: Iterable[ServiceCredential] = (), path: Path | None = None,
                 clock: Callable[[], float] = time.time):
        self._fixed = tuple(credentials)
        self._file = WatchedFile(path, read_credentials_file) if path is not None else None
        self._clock = clock

    @classmethod
    def from_config(cls, config: CitadelConfig, clock: Callable[[], float] = time.time) -> CredentialStore:
        return cls(config.identity.services, config.credentials_path, clock)

    def _entries(self) -> tuple[ServiceCredential, ...]:
        return self._fixed + tuple(self._file.get() if self._file is not None else ())

    def authenticate(self, authorization_header: str | None) -> ServiceIdentity:
        digest = bearer_digest(authorization_header)
        match = None
        for entry in self._entries():  # no early exit: timing does not reveal which entry matched
            if hmac.compare_digest(entry.token_sha256.lower(), digest):
                match = entry
        if match is None:
            raise Unauthenticated("unknown service credential", code="invalid_credential")
        if match.revoked_at is not None:
            raise Unauthenticated("this service credential was revoked", code="credential_revoked")
        if match.expires_at is not None and self._clock() >= match.expires_at:
            raise Unauthenticated("this service credential has expired", code="credential_expired")
        return ServiceIdentity(match.id, match.admin, frozenset(match.tenants))
