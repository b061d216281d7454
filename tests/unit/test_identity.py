"""Identity layer: service credentials, signed user contexts, signing key, facade and CLI (DESIGN.md §4.1)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import stat

import pytest
from typer.testing import CliRunner

from citadel.cli.main import app
from citadel.config import CitadelConfig, ServiceCredential, load_config
from citadel.errors import CitadelError
from citadel.identity import (
    SIGNING_KEY_ENV,
    Authenticator,
    CredentialStore,
    Forbidden,
    ServiceIdentity,
    Unauthenticated,
    UserContextVerifier,
    add_credential,
    load_or_create_signing_key,
    load_signing_key,
    read_credentials_file,
    sign_user_context,
    signing_key_from,
)
from citadel.types import Principal

KEY = bytes(range(32))
NOW = 1_700_000_000
AUD = "citadel"
MAX_TTL, LEEWAY = 900, 30
SVC = ServiceIdentity("portal", admin=False)


def _sign(**overrides) -> str:
    args = dict(key=KEY, tenant="acme", user="ann", groups=["staff", "hr"], service_id=SVC.id,
                ttl_s=600, audience=AUD, now=NOW)
    return sign_user_context(**{**args, **overrides})


def _verifier(now: float = NOW, key: bytes = KEY) -> UserContextVerifier:
    return UserContextVerifier(key, AUD, MAX_TTL, LEEWAY, clock=lambda: now)


def _forge(payload: dict, key: bytes = KEY) -> str:
    """A correctly signed token around an arbitrary payload, to reach the claim checks."""
    segment = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    mac = hmac.new(key, segment.encode(), hashlib.sha256).digest()
    return segment + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def _claims(**overrides) -> dict:
    base = {"tenant": "acme", "sub": "ann", "groups": ["staff"], "iat": NOW, "exp": NOW + 600,
            "aud": AUD, "svc": SVC.id}
    return {k: v for k, v in {**base, **overrides}.items() if v is not ...}


def _code(call) -> str:
    with pytest.raises(Unauthenticated) as info:
        call()
    return info.value.code


# ----------------------------------------------------------------------------- user context

def test_round_trip_gives_the_principal_from_the_token():
    principal = _verifier().verify(_sign(jti="r1"), SVC)
    assert principal == Principal("acme", "ann", frozenset({"staff", "hr"}))


def test_leeway_accepts_small_skew_on_both_ends():
    assert _verifier(now=NOW + 600 + LEEWAY).verify(_sign(), SVC).tenant_id == "acme"
    assert _verifier(now=NOW - LEEWAY).verify(_sign(), SVC).user_id == "ann"


@pytest.mark.parametrize("token", ["", "abc", "a.b.c", ".sig", "payload.", "a!b.c", "YWJj.not base64", "é.x"])
def test_malformed(token):
    assert _code(lambda: _verifier().verify(token, SVC)) == "malformed_user_context"


def test_signed_but_not_a_json_object_is_malformed():
    segment = base64.urlsafe_b64encode(b"[1, 2]").rstrip(b"=").decode()
    mac = base64.urlsafe_b64encode(hmac.new(KEY, segment.encode(), hashlib.sha256).digest()).rstrip(b"=").decode()
    assert _code(lambda: _verifier().verify(f"{segment}.{mac}", SVC)) == "malformed_user_context"


def test_wrong_key_and_tampered_payload_fail_the_signature():
    assert _code(lambda: _verifier(key=b"k" * 32).verify(_sign(), SVC)) == "invalid_signature"
    segment, mac = _sign().split(".")
    tampered = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    tampered["groups"].append("admins")
    forged = base64.urlsafe_b64encode(json.dumps(tampered).encode()).rstrip(b"=").decode()
    assert _code(lambda: _verifier().verify(f"{forged}.{mac}", SVC)) == "invalid_signature"


def test_non_canonical_signature_spelling_is_rejected():
    segment, mac = _sign().split(".")
    assert _code(lambda: _verifier().verify(f"{segment}.{mac}=", SVC)) == "malformed_user_context"


def test_expired_beyond_leeway():
    assert _code(lambda: _verifier(now=NOW + 600 + LEEWAY + 1).verify(_sign(), SVC)) == "expired_user_context"


def test_issued_in_the_future_or_living_too_long_is_invalid():
    assert _code(lambda: _verifier(now=NOW - LEEWAY - 1).verify(_sign(), SVC)) == "invalid_user_context"
    assert _code(lambda: _verifier().verify(_sign(ttl_s=MAX_TTL + 1), SVC)) == "invalid_user_context"


def test_wrong_audience():
    assert _code(lambda: _verifier().verify(_sign(audience="other"), SVC)) == "wrong_audience"


def test_token_for_service_a_presented_by_service_b_is_rejected():
    token = _sign(service_id="portal")
    assert _code(lambda: _verifier().verify(token, ServiceIdentity("intranet"))) == "user_context_not_bound_to_caller"


@pytest.mark.parametrize("claims", [
    _claims(tenant=...), _claims(tenant=""), _claims(tenant=7), _claims(tenant="a\x00b"), _claims(tenant="t" * 257),
    _claims(sub=...), _claims(sub=""), _claims(sub=["ann"]),
    _claims(groups=...), _claims(groups="staff"), _claims(groups=["staff", 3]), _claims(groups=["ok", "bad\n"]),
    _claims(iat=...), _claims(exp="later"), _claims(iat=True), _claims(exp=NOW), _claims(jti=5),
])
def test_invalid_claims(claims):
    assert _code(lambda: _verifier().verify(_forge(claims), SVC)) == "invalid_user_context"


def test_groups_come_only_from_the_token():
    """Same caller, same user: the groups are exactly what was signed (the API takes no other source)."""
    assert _verifier().verify(_forge(_claims(groups=[])), SVC).groups == frozenset()
    assert _verifier().verify(_sign(groups=["hr", "hr"]), SVC).groups == frozenset({"hr"})


def test_signing_refuses_bad_input():
    with pytest.raises(ValueError):
        _sign(groups=["ok", "bad\x07"])
    with pytest.raises(ValueError):
        _sign(ttl_s=0)


# ----------------------------------------------------------------------------- service credentials

def _store(tmp_path):
    path = tmp_path / "secrets" / "credentials.json"
    admin_token = add_credential(path, "ops", admin=True)
    token = add_credential(path, "portal")
    return path, admin_token, token


def test_credentials_file_is_0600_and_holds_only_hashes(tmp_path):
    path, admin_token, token = _store(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    text = path.read_text()
    assert admin_token not in text and token not in text
    assert hashlib.sha256(token.encode()).hexdigest() in text
    assert [e["id"] for e in json.loads(text)["services"]] == ["ops", "portal"]


def test_credential_auth_good_bad_missing_wrong_scheme(tmp_path):
    path, admin_token, token = _store(tmp_path)
    config_entry = ServiceCredential(id="batch", token_sha256=hashlib.sha256(b"from-config").hexdigest())
    store = CredentialStore([config_entry, *read_credentials_file(path)])
    assert store.authenticate(f"Bearer {token}") == ServiceIdentity("portal", False)
    assert store.authenticate(f"bearer  {admin_token} ") == ServiceIdentity("ops", True)
    assert store.authenticate("Bearer from-config") == ServiceIdentity("batch", False)
    assert _code(lambda: store.authenticate(None)) == "missing_credential"
    assert _code(lambda: store.authenticate("  ")) == "missing_credential"
    assert _code(lambda: store.authenticate("Bearer nope")) == "invalid_credential"
    assert _code(lambda: store.authenticate(f"Basic {token}")) == "invalid_credential"
    assert _code(lambda: store.authenticate(token)) == "invalid_credential"
    assert _code(lambda: CredentialStore([]).authenticate(f"Bearer {token}")) == "invalid_credential"


def test_corrupt_credentials_file_fails_closed(tmp_path):
    path = tmp_path / "credentials.json"
    path.write_text('{"services": [{"id": "x"}]}')
    with pytest.raises(CitadelError) as info:
        read_credentials_file(path)
    assert info.value.code == "invalid_credentials_file"


# ----------------------------------------------------------------------------- signing key

def test_signing_key_created_0600_in_0700_dir_and_stable(tmp_path):
    path = tmp_path / "secrets" / "signing.key"
    with pytest.raises(CitadelError) as info:
        load_signing_key(path)
    assert info.value.code == "signing_key_missing"
    key = load_or_create_signing_key(path)
    assert len(key) == 32 and load_or_create_signing_key(path) == key == load_signing_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["signing.key"]  # no temp file left behind


def test_signing_key_env_override(tmp_path):
    config = CitadelConfig(home=tmp_path)
    assert signing_key_from(config, environ={SIGNING_KEY_ENV: KEY.hex()}) == KEY
    for bad in ("zz", "ab" * 8):  # not hex; too short
        with pytest.raises(CitadelError) as info:
            signing_key_from(config, environ={SIGNING_KEY_ENV: bad})
        assert info.value.code == "invalid_signing_key"
    with pytest.raises(CitadelError):
        signing_key_from(config, environ={})  # a server never invents its key
    assert signing_key_from(config, environ={}, create=True) == load_signing_key(config.signing_key_path)


# ----------------------------------------------------------------------------- facade

def test_authenticator_end_to_end_and_admin(tmp_path):
    config = CitadelConfig(home=tmp_path)
    _, admin_token, token = _store(tmp_path)
    auth = Authenticator.from_config(config, clock=lambda: NOW, environ={SIGNING_KEY_ENV: KEY.hex()})
    service, principal = auth.authenticate(f"Bearer {token}", _sign())
    assert service.id == "portal" and principal.groups == frozenset({"staff", "hr"})
    assert _code(lambda: auth.authenticate(f"Bearer {token}", None)) == "missing_user_context"
    assert _code(lambda: auth.authenticate(f"Bearer {admin_token}", _sign())) == "user_context_not_bound_to_caller"
    assert _code(lambda: auth.authenticate(None, _sign())) == "missing_credential"
    assert auth.require_admin(f"Bearer {admin_token}").id == "ops"
    with pytest.raises(Forbidden) as info:
        auth.require_admin(f"Bearer {token}")
    assert info.value.code == "admin_required"


# ----------------------------------------------------------------------------- CLI

@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args), catch_exceptions=False)


def test_cli_token_verifies_with_the_key_file(cli):
    result = cli("token", "--tenant", "acme", "--user", "ann", "--groups", "staff, hr", "--service", "portal")
    assert result.exit_code == 0, result.output
    config = load_config()
    key = load_signing_key(config.signing_key_path)
    verifier = UserContextVerifier(key, config.identity.audience, config.identity.max_ttl_s, config.identity.leeway_s)
    principal = verifier.verify(result.stdout.strip(), ServiceIdentity("portal"))
    assert principal == Principal("acme", "ann", frozenset({"staff", "hr"}))
    ttl = str(config.identity.max_ttl_s + 1)
    too_long = cli("token", "--tenant", "a", "--user", "u", "--service", "s", "--ttl", ttl)
    assert too_long.exit_code == 2


def test_cli_credentials_add_then_authenticate_and_list(cli, tmp_path):
    result = cli("credentials", "add", "ops", "--admin")
    assert result.exit_code == 0, result.output
    secret = result.stdout.strip()
    config = load_config()
    assert secret not in config.credentials_path.read_text()
    assert CredentialStore.from_config(config).authenticate(f"Bearer {secret}") == ServiceIdentity("ops", True)
    listed = json.loads(cli("credentials", "list").stdout)
    assert [(e["id"], e["admin"], e["source"]) for e in listed] == [("ops", True, "file")]
    assert len(listed[0]["fingerprint"]) < 64
