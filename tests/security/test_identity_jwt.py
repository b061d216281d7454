"""Each service signs with its own key, for its own tenants: never one key for every caller.

Before: any service that could mint user contexts held the one HMAC key, so it could sign any tenant,
any groups, for any service; credentials had no tenant list, no expiry and no revocation. Now user
contexts are JWTs whose `kid` picks the key (a service's own HS256 secret, or an identity provider's
public key from a JWKS), the key pins the algorithm, a credential acts only for its tenants, and
credentials expire and can be revoked. Every test goes through the HTTP app.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest
from typer.testing import CliRunner

from tests.security.identity_helpers import add_credential, client_for, error_code, forged_context, headers
from tests.integration.conftest import make_home

QUERY = {"query": "hotel limit per night", "top_k": 3}


@pytest.fixture
def home(tmp_path, monkeypatch):
    root = tmp_path / "home"
    monkeypatch.setenv("CITADEL_HOME", str(root))  # the CLI calls below manage this same home
    monkeypatch.setenv("CITADEL_EMBEDDING__BACKEND", "hash")
    return make_home(root)


def _cli(*args) -> str:
    from citadel.cli.main import app

    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def _retrieve(client, token: str, context: str):
    return client.post("/v1/retrieve", json=QUERY,
                       headers={"authorization": f"Bearer {token}", "x-citadel-user-context": context})


def _claims(home, service: str = "app", tenant: str = "acme", **extra) -> dict:
    now = int(time.time())
    return {"tenant": tenant, "sub": "ann", "groups": ["staff"], "iat": now, "exp": now + 300,
            "aud": home.config.identity.audience, "svc": service, **extra}


def test_a_context_for_a_tenant_outside_the_services_scope_is_403(home):
    token = add_credential(home, "portal", ["acme"])
    with client_for(home) as client:
        assert client.post("/v1/retrieve", json=QUERY, headers=headers(home, token, "portal", "acme")).status_code == 200
        response = client.post("/v1/retrieve", json=QUERY, headers=headers(home, token, "portal", "northwind"))
        assert response.status_code == 403, response.text
        assert error_code(response) == "tenant_not_allowed"
        answer = client.post("/v1/answer", json={"question": "hotel limit?"},
                             headers=headers(home, token, "portal", "northwind"))
        assert (answer.status_code, error_code(answer)) == (403, "tenant_not_allowed")


def test_service_x_cannot_forge_a_context_that_verifies_for_service_y(home):
    x_token = add_credential(home, "x", ["acme"])
    y_token = add_credential(home, "y", ["acme"])
    with client_for(home) as client:
        assert client.post("/v1/retrieve", json=QUERY, headers=headers(home, y_token, "y")).status_code == 200
        assert client.post("/v1/retrieve", json=QUERY, headers=headers(home, x_token, "x")).status_code == 200
        # x signs with everything it holds, names y as the service, groups of its choosing
        forged = forged_context(home, signer="x", claimed_service="y", groups=("staff", "exec"))
        response = _retrieve(client, y_token, forged)
        assert response.status_code == 401, response.text
        assert error_code(response) in {"invalid_signature", "user_context_not_bound_to_caller", "unknown_key"}


def test_kid_selects_the_key(home):
    from citadel.identity.keys import add_service_key, current_service_key

    token = add_credential(home, "app-2", ["acme"])
    old = current_service_key(home.config.service_keys_path, "app-2", create=True)
    new = add_service_key(home.config.service_keys_path, "app-2")
    other = current_service_key(home.config.service_keys_path, "x", create=True)
    with client_for(home) as client:
        claims = _claims(home, "app-2")
        assert _retrieve(client, token, jwt.encode(claims, old.secret_bytes, "HS256", {"kid": old.kid})).status_code == 200
        assert _retrieve(client, token, jwt.encode(claims, new.secret_bytes, "HS256", {"kid": new.kid})).status_code == 200
        wrong_kid = _retrieve(client, token, jwt.encode(claims, old.secret_bytes, "HS256", {"kid": new.kid}))
        assert (wrong_kid.status_code, error_code(wrong_kid)) == (401, "invalid_signature")
        # x's own key, correctly used, still cannot sign for app-2
        foreign = _retrieve(client, token, jwt.encode(claims, other.secret_bytes, "HS256", {"kid": other.kid}))
        assert (foreign.status_code, error_code(foreign)) == (401, "user_context_not_bound_to_caller")
        unknown = _retrieve(client, token, jwt.encode(claims, old.secret_bytes, "HS256", {"kid": "nope"}))
        assert (unknown.status_code, error_code(unknown)) == (401, "unknown_key")


def test_two_keys_are_valid_during_rotation_then_the_old_one_retires(home):
    token = _cli("credentials", "add", "portal", "--tenants", "acme")
    minted = ("token", "--service", "portal", "--tenant", "acme", "--user", "ann", "--groups", "staff")
    before = _cli(*minted)
    rotated = json.loads(_cli("credentials", "rotate-key", "portal"))
    after = _cli(*minted)
    old_kid = jwt.get_unverified_header(before)["kid"]
    assert jwt.get_unverified_header(after)["kid"] == rotated["kid"] != old_kid  # new contexts use the newest
    with client_for(home) as client:
        assert _retrieve(client, token, before).status_code == 200
        assert _retrieve(client, token, after).status_code == 200
        _cli("credentials", "retire-key", old_kid)  # seen by the running gateway without a restart
        retired = _retrieve(client, token, before)
        assert (retired.status_code, error_code(retired)) == (401, "unknown_key")
        assert _retrieve(client, token, after).status_code == 200


def test_a_revoked_credential_is_401_on_a_running_gateway(home):
    token = add_credential(home, "portal", ["acme"])
    with client_for(home) as client:
        assert client.post("/v1/retrieve", json=QUERY, headers=headers(home, token, "portal")).status_code == 200
        result = CliRunner().invoke(__import__("citadel.cli.main", fromlist=["app"]).app,
                                    ["credentials", "revoke", "portal"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        response = client.post("/v1/retrieve", json=QUERY, headers=headers(home, token, "portal"))
        assert response.status_code == 401, response.text
        assert error_code(response) == "credential_revoked"


def test_an_expired_credential_is_401(home):
    token = add_credential(home, "portal", ["acme"], expires_at=time.time() - 1)
    with client_for(home) as client:
        response = client.post("/v1/retrieve", json=QUERY, headers=headers(home, token, "portal"))
        assert response.status_code == 401, response.text
        assert error_code(response) == "credential_expired"


# ----------------------------------------------------------------------------- algorithms and JWKS

def _keypair(algorithm: str):
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    if algorithm == "EdDSA":
        private = ed25519.Ed25519PrivateKey.generate()
        jwk = jwt.algorithms.OKPAlgorithm.to_jwk(private.public_key(), as_dict=True)
    elif algorithm == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
        jwk = jwt.algorithms.ECAlgorithm.to_jwk(private.public_key(), as_dict=True)
    else:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
    return private, jwk


def _with_provider(home, tmp_path, algorithm: str, services=("app",)):
    from citadel.config import IdentityProviderConfig

    private, jwk = _keypair(algorithm)
    jwk["kid"] = f"idp-{algorithm.lower()}"
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk]}))
    home.config.identity.providers = [IdentityProviderConfig(issuer="https://idp.example", jwks_file=jwks,
                                                             services=list(services))]
    return private, jwk["kid"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hand_signed(header: dict, claims: dict, secret: bytes) -> str:
    """A JWT signed HS256 by hand (PyJWT itself refuses a PEM public key as an HMAC secret)."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{_b64(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())}"


def test_alg_none_and_algorithm_confusion_are_refused(home, tmp_path):
    from cryptography.hazmat.primitives import serialization

    from citadel.identity.keys import current_service_key

    private, kid = _with_provider(home, tmp_path, "RS256")
    app_key = current_service_key(home.config.service_keys_path, "app", create=True)
    claims = _claims(home, iss="https://idp.example")
    pem = private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with client_for(home) as client:
        genuine = jwt.encode(claims, private, algorithm="RS256", headers={"kid": kid})
        assert _retrieve(client, home.service_token, genuine).status_code == 200
        attempts = {
            "none under the service's kid": jwt.encode(claims, None, algorithm="none", headers={"kid": app_key.kid}),
            "none under the provider's kid": jwt.encode(claims, None, algorithm="none", headers={"kid": kid}),
            "HS256 keyed with the RSA public key": _hand_signed({"alg": "HS256", "typ": "JWT", "kid": kid}, claims, pem),
            "HS512 with the service's own secret": jwt.encode(_claims(home), app_key.secret_bytes, algorithm="HS512",
                                                              headers={"kid": app_key.kid}),
        }
        for what, token in attempts.items():
            response = _retrieve(client, home.service_token, token)
            assert response.status_code == 401, f"{what}: {response.text}"


@pytest.mark.parametrize("algorithm", ["EdDSA", "ES256"])
def test_identity_provider_contexts_verify_and_a_service_secret_cannot_forge_them(home, tmp_path, algorithm):
    from citadel.identity.keys import current_service_key

    private, kid = _with_provider(home, tmp_path, algorithm)
    other = add_credential(home, "other", ["acme"])
    app_key = current_service_key(home.config.service_keys_path, "app", create=True)
    claims = _claims(home, iss="https://idp.example")
    with client_for(home) as client:
        genuine = jwt.encode(claims, private, algorithm=algorithm, headers={"kid": kid})
        assert _retrieve(client, home.service_token, genuine).status_code == 200
        # the service's HS256 secret under the provider's kid: the kid pins the provider's algorithm
        forged = jwt.encode(claims, app_key.secret_bytes, algorithm="HS256", headers={"kid": kid})
        assert (_retrieve(client, home.service_token, forged).status_code, error_code(
            _retrieve(client, home.service_token, forged))) == (401, "algorithm_not_allowed")
        wrong_issuer = jwt.encode({**claims, "iss": "https://elsewhere"}, private, algorithm=algorithm,
                                  headers={"kid": kid})
        assert error_code(_retrieve(client, home.service_token, wrong_issuer)) == "wrong_issuer"
        # a service the provider does not list cannot present its contexts, even naming itself
        for_other = jwt.encode({**claims, "svc": "other"}, private, algorithm=algorithm, headers={"kid": kid})
        response = _retrieve(client, other, for_other)
        assert (response.status_code, error_code(response)) == (401, "user_context_not_bound_to_caller")
