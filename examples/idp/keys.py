"""The token service's signing key (ES256, P-256) and the JWKS that publishes its public half.

The private key lives in `<home>/secrets/idp_signing_key.pem` (0600, made on first start); only the
token service reads it. The public keys are written to `<home>/idp/jwks.json`, the file the CRM
reads through Citadel's `read_jwks` (and served at `/.well-known/jwks.json`). The kid is the key's
RFC 7638 thumbprint, so a new key gets a new kid.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm
from jwt.utils import base64url_encode

from citadel.config import CitadelConfig, IdentityProviderConfig
from citadel.identity.base import locked, replace_secret_file

ALGORITHM = "ES256"
# Who the tokens are from (`iss`); fixed, so it does not depend on the port the service got.
ISSUER = "urn:citadel:example-idp"


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private: ec.EllipticCurvePrivateKey

    def public_jwk(self) -> dict:
        return {**ECAlgorithm.to_jwk(self.private.public_key(), as_dict=True), "kid": self.kid, "alg": ALGORITHM,
                "use": "sig"}


def key_path(config: CitadelConfig) -> Path:
    return Path(config.secrets_dir) / "idp_signing_key.pem"


def jwks_path(home: Path) -> Path:
    return Path(home) / "idp" / "jwks.json"


def provider(config: CitadelConfig) -> IdentityProviderConfig:
    """The token service as Citadel's identity code sees a provider: its issuer, its JWKS file, and the
    one service that may present its tokens (Citadel's tools, the actor in every token)."""
    return IdentityProviderConfig(issuer=ISSUER, jwks_file=jwks_path(Path(config.home)),
                                  services=[config.tools.service_id])


def signing_key(config: CitadelConfig) -> SigningKey:
    """The service's key, made on first use (concurrent starters agree on one)."""
    path = key_path(config)
    with locked(path):
        if not path.exists():
            made = ec.generate_private_key(ec.SECP256R1())
            pem = made.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())
            replace_secret_file(path, pem.decode())
        private = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(private, ec.EllipticCurvePrivateKey) or not isinstance(private.curve, ec.SECP256R1):
        raise ValueError(f"{path.name} is not a P-256 private key")
    return SigningKey(_thumbprint(private.public_key()), private)


def publish_jwks(home: Path, key: SigningKey) -> Path:
    """Write the public JWKS (atomically: a reader sees the old file or the new one)."""
    path = jwks_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"keys": [key.public_jwk()]}, indent=1) + "\n")
    tmp.replace(path)
    return path


def _thumbprint(public: ec.EllipticCurvePublicKey) -> str:
    """RFC 7638: SHA-256 over the required members in lexicographic order, no whitespace."""
    jwk = ECAlgorithm.to_jwk(public, as_dict=True)
    canonical = json.dumps({k: jwk[k] for k in ("crv", "kty", "x", "y")}, separators=(",", ":"), sort_keys=True)
    digest = hashes.Hash(hashes.SHA256())
    digest.update(canonical.encode())
    return base64url_encode(digest.finalize()).decode()
