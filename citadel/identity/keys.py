"""The keys user contexts are signed with, each found by its `kid` (DESIGN.md §4.1).

Two kinds, never mixed up:
- **Per-service HS256 secrets** (`<home>/secrets/service_keys.json`, 0600): a context signed with
  service X's secret verifies only when X is the caller, so one service cannot speak for another's
  users. A service may hold several kids at once: new contexts use its newest, older ones stay valid
  until retired (rotation without downtime).
- **Identity-provider public keys** from a JWKS file (EdDSA, ES256, RS256), for contexts that no
  service can forge: the provider holds the private key, the config lists its issuer and the
  services that may present its contexts.

Each key pins its one algorithm here, from the key itself; the token's `alg` header is never what
decides (no `none`, no HS256-signed-with-an-RSA-public-key confusion).
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from citadel.config import CitadelConfig, IdentityProviderConfig
from citadel.errors import CitadelError
from citadel.identity.base import MAX_NAME_CHARS, WatchedFile, locked, replace_secret_file, valid_name

HS256 = "HS256"
SECRET_BYTES = 32  # generated HS256 secret: the full SHA-256 block-safe strength
MIN_SECRET_BYTES = 32  # a shorter (hand-made) secret is refused rather than weakly used
KID_PREFIX = "hs-"
MAX_JWKS_BYTES = 1024 * 1024
MIN_RSA_BITS = 2048
# The public-key kinds a JWKS may hold, and the one algorithm each is verified with.
ALGORITHM_OF_KEY = {("OKP", "Ed25519"): "EdDSA", ("EC", "P-256"): "ES256", ("RSA", None): "RS256"}
PRIVATE_JWK_MEMBERS = ("d", "p", "q", "dp", "dq", "qi", "k")


class ServiceKey(BaseModel):
    """One HS256 secret of one service, as stored in the service keys file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kid: str = Field(..., min_length=1, max_length=MAX_NAME_CHARS)
    service: str = Field(..., min_length=1, max_length=MAX_NAME_CHARS)
    secret: str = Field(..., min_length=2 * MIN_SECRET_BYTES, description="hex")
    created_at: float

    @property
    def secret_bytes(self) -> bytes:
        return bytes.fromhex(self.secret)


@dataclass(frozen=True)
class VerificationKey:
    """What verifies one kid: its pinned algorithm, its key, and who may use it."""

    kid: str
    algorithm: str
    key: Any  # bytes for HS256, a cryptography public key otherwise
    service: str | None = None  # HS256: the one service whose contexts it signs
    issuer: str | None = None  # JWKS: the provider's `iss`
    services: frozenset[str] = frozenset()  # JWKS: the services that may present its contexts


def _invalid(path: Path, why: Any) -> CitadelError:
    return CitadelError(f"{path}: not a valid service keys file ({why})", code="invalid_service_keys_file")


# ----------------------------------------------------------------------------- service HS256 secrets

def read_service_keys(path: Path) -> list[ServiceKey]:
    """The stored HS256 secrets; none if the file does not exist. A corrupt file is an error."""
    if not path.exists():
        return []
    try:
        keys = [ServiceKey.model_validate(item) for item in json.loads(path.read_text())["keys"]]
        for key in keys:
            if len(key.secret_bytes) < MIN_SECRET_BYTES:
                raise ValueError(f"the secret of {key.kid} is under {MIN_SECRET_BYTES} bytes")
    except (ValueError, KeyError, TypeError, ValidationError) as error:
        raise _invalid(path, error) from error
    if len({k.kid for k in keys}) != len(keys):
        raise _invalid(path, "a kid appears twice")
    return keys


def _write_service_keys(path: Path, keys: list[ServiceKey]) -> None:
    replace_secret_file(path, json.dumps({"keys": [k.model_dump() for k in keys]}, indent=1) + "\n")


def newest_key(keys: list[ServiceKey], service: str) -> ServiceKey | None:
    """The key new contexts of `service` are signed with (the latest created; later in the file wins ties)."""
    own = [k for k in keys if k.service == service]
    return max(reversed(own), key=lambda k: k.created_at) if own else None


def add_service_key(path: Path, service: str, now: float | None = None) -> ServiceKey:
    """A new HS256 secret for `service`; it becomes the one new contexts use, older ones stay valid."""
    if not valid_name(service):
        raise ValueError(f"service id must be 1-{MAX_NAME_CHARS} characters without control characters")
    with locked(path):
        keys = read_service_keys(path)
        key = ServiceKey(kid=KID_PREFIX + secrets.token_hex(8), service=service,
                         secret=secrets.token_bytes(SECRET_BYTES).hex(), created_at=time.time() if now is None else now)
        _write_service_keys(path, [*keys, key])
    return key


def current_service_key(path: Path, service: str, create: bool = False) -> ServiceKey:
    """The newest key of `service`, made first when `create` (concurrent creators agree on one)."""
    with locked(path):
        found = newest_key(read_service_keys(path), service)
    if found is None and create:
        with locked(path):  # re-read under the lock: another process may have just made one
            keys = read_service_keys(path)
            found = newest_key(keys, service)
            if found is None:
                found = ServiceKey(kid=KID_PREFIX + secrets.token_hex(8), service=service,
                                   secret=secrets.token_bytes(SECRET_BYTES).hex(), created_at=time.time())
                _write_service_keys(path, [*keys, found])
    if found is None:
        raise CitadelError(f"service {service!r} has no signing key in {path}; `citadel token` or "
                           f"`citadel credentials rotate-key {service}` creates one", code="signing_key_missing")
    return found


def retire_service_key(path: Path, kid: str) -> ServiceKey | None:
    """Remove one kid: contexts signed with it stop verifying. Returns what was removed."""
    with locked(path):
        keys = read_service_keys(path)
        gone = next((k for k in keys if k.kid == kid), None)
        if gone is not None:
            _write_service_keys(path, [k for k in keys if k.kid != kid])
    return gone


def _hs256_keys(path: Path) -> list[VerificationKey]:
    return [VerificationKey(k.kid, HS256, k.secret_bytes, service=k.service) for k in read_service_keys(path)]


# ----------------------------------------------------------------------------- identity-provider JWKS

def _algorithm_of(jwk: dict) -> str:
    kty, crv = jwk.get("kty"), jwk.get("crv")
    algorithm = ALGORITHM_OF_KEY.get((kty, crv if kty != "RSA" else None))
    if algorithm is None:
        raise ValueError(f"key type {kty!r}/{crv!r} is not one of Ed25519, P-256 or RSA")
    if jwk.get("alg") not in (None, algorithm):
        raise ValueError(f"a {kty} key declares alg {jwk['alg']!r}; only {algorithm} is accepted for it")
    if jwk.get("use") not in (None, "sig"):
        raise ValueError("a key whose use is not 'sig'")
    return algorithm


def read_jwks(provider: IdentityProviderConfig) -> list[VerificationKey]:
    """The provider's public keys. Private members, symmetric keys, weak RSA and a missing kid are
    refused: the file configures trust, so anything odd in it is an error, not a skipped key."""
    path = provider.jwks_file
    try:
        if path.stat().st_size > MAX_JWKS_BYTES:
            raise ValueError(f"over {MAX_JWKS_BYTES} bytes")
        entries = json.loads(path.read_text())["keys"]
        if not isinstance(entries, list):
            raise ValueError("'keys' is not a list")
        keys = []
        for jwk in entries:
            if not isinstance(jwk, dict) or not valid_name(jwk.get("kid")):
                raise ValueError("every key needs a kid")
            if any(member in jwk for member in PRIVATE_JWK_MEMBERS):
                raise ValueError(f"key {jwk['kid']!r} holds private or symmetric material; publish public keys only")
            algorithm = _algorithm_of(jwk)
            public = jwt.PyJWK(jwk, algorithm).key
            if algorithm == "RS256" and public.key_size < MIN_RSA_BITS:
                raise ValueError(f"RSA key {jwk['kid']!r} is under {MIN_RSA_BITS} bits")
            keys.append(VerificationKey(jwk["kid"], algorithm, public, issuer=provider.issuer,
                                        services=frozenset(provider.services)))
        return keys
    except (OSError, ValueError, KeyError, TypeError, jwt.PyJWKError, jwt.InvalidKeyError) as error:
        raise CitadelError(f"{path}: not a usable JWKS ({error})", code="invalid_jwks") from error


# ----------------------------------------------------------------------------- the ring

class KeyRing:
    """kid → VerificationKey over the service keys file and every provider's JWKS, each re-read
    when it changes. A kid in two places is ambiguous, so it is refused rather than guessed."""

    def __init__(self, service_keys_path: Path | None, providers: list[IdentityProviderConfig] = ()):
        self._sources = ([WatchedFile(service_keys_path, _hs256_keys)] if service_keys_path is not None else [])
        self._sources += [WatchedFile(p.jwks_file, lambda _path, p=p: read_jwks(p)) for p in providers]
        self._seen: tuple | None = None
        self._index: dict[str, VerificationKey] = {}

    @classmethod
    def from_config(cls, config: CitadelConfig) -> KeyRing:
        return cls(config.service_keys_path, list(config.identity.providers))

    def find(self, kid: str) -> VerificationKey | None:
        loaded = tuple(source.get() for source in self._sources)
        if self._seen is None or any(a is not b for a, b in zip(loaded, self._seen)):
            index: dict[str, VerificationKey] = {}
            for key in (k for keys in loaded for k in keys):
                if key.kid in index:
                    raise CitadelError(f"kid {key.kid!r} is defined twice across the key sources",
                                       code="ambiguous_kid")
                index[key.kid] = key
            self._index, self._seen = index, loaded
        return self._index.get(kid)
