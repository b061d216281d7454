"""Identity layer (DESIGN.md §4.1): service credentials (tenants, expiry, revocation), user-context
JWTs, per-service keys by kid, identity-provider JWKS, the facade and the CLI."""

from __future__ import annotations

import base64
import hashlib
import json
import stat

import jwt
import pytest
from typer.testing import CliRunner

from citadel.cli.main import app
from citadel.config import CitadelConfig, IdentityProviderConfig, ServiceCredential, load_config
from citadel.errors import CitadelError
from citadel.identity.authenticator import Authenticator
from citadel.errors import Forbidden, Unauthenticated
from citadel.identity.context import UserContextVerifier, sign_user_context
from citadel.identity.credentials import (
    ALL_TENANTS,
    CredentialStore,
    ServiceIdentity,
    add_credential,
    fingerprint,
    read_credentials_file,
    revoke_credentials,
)
from citadel.identity.keys import (
    KeyRing,
    ServiceKey,
    add_service_key,
    current_service_key,
    read_service_keys,
    retire_service_key,
)
from citadel.types import Principal

NOW = 1_700_000_000
AUD = "citadel"
MAX_TTL, LEEWAY = 900, 30
SVC = ServiceIdentity("portal", tenants=frozenset({"acme"}))
KEY = ServiceKey(kid="hs-portal-1", service="portal", secret=bytes(range(32)).hex(), created_at=NOW)


class _Ring:
    """A KeyRing stand-in over fixed keys."""

    def __init__(self, *keys):
        from citadel.identity.keys import HS256, VerificationKey

        self._keys = {k.kid: VerificationKey(k.kid, HS256, k.secret_bytes, service=k.service) for k in keys}

    def find(self, kid):
        return self._keys.get(kid)


def _sign(key: ServiceKey = KEY, **overrides) -> str:
    args = dict(tenant="acme", user="ann", groups=["staff", "hr"], ttl_s=600, audience=AUD, now=NOW)
    return sign_user_context(key, **{**args, **overrides})


def _verifier(now: float = NOW, *keys: ServiceKey) -> UserContextVerifier:
    return UserContextVerifier(_Ring(*(keys or (KEY,))), AUD, MAX_TTL, LEEWAY, clock=lambda: now)


def _forge(payload: dict, key: ServiceKey = KEY, **headers) -> str:
    """A correctly signed JWT around an arbitrary payload, to reach the claim checks."""
    return jwt.encode(payload, key.secret_bytes, algorithm="HS256", headers={"kid": key.kid, **headers})


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
    token = _sign(jti="r1")
    assert jwt.get_unverified_header(token) == {"alg": "HS256", "typ": "JWT", "kid": KEY.kid}
    assert _verifier().verify(token, SVC) == Principal("acme", "ann", frozenset({"staff", "hr"}))


def test_leeway_accepts_small_skew_on_both_ends():
    assert _verifier(NOW + 600 + LEEWAY).verify(_sign(), SVC).tenant_id == "acme"
    assert _verifier(NOW - LEEWAY).verify(_sign(), SVC).user_id == "ann"


@pytest.mark.parametrize("token", ["", "abc", "a.b", "a.b.c", ".sig.", "a!b.c.d", "YWJj.not base64.x", "é.x.y",
                                   "x" * (64 * 1024 + 1)])
def test_malformed(token):
    assert _code(lambda: _verifier().verify(token, SVC)) == "malformed_user_context"


def test_a_header_without_kid_or_with_an_unknown_kid_is_refused():
    no_kid = jwt.encode(_claims(), KEY.secret_bytes, algorithm="HS256")
    assert _code(lambda: _verifier().verify(no_kid, SVC)) == "malformed_user_context"
    assert _code(lambda: _verifier().verify(_forge(_claims(), kid="retired"), SVC)) == "unknown_key"


def test_wrong_key_and_tampered_payload_fail_the_signature():
    other = KEY.model_copy(update={"secret": (b"k" * 32).hex()})
    assert _code(lambda: _verifier().verify(_sign(other), SVC)) == "invalid_signature"
    header, payload, signature = _sign().split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["groups"].append("admins")
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert _code(lambda: _verifier().verify(f"{header}.{forged}.{signature}", SVC)) == "invalid_signature"


def test_alg_none_and_other_algorithms_are_refused_for_an_hs256_key():
    unsigned = jwt.encode(_claims(), None, algorithm="none", headers={"kid": KEY.kid})
    assert _code(lambda: _verifier().verify(unsigned, SVC)) == "algorithm_not_allowed"
    hs512 = jwt.encode(_claims(), KEY.secret_bytes, algorithm="HS512", headers={"kid": KEY.kid})
    assert _code(lambda: _verifier().verify(hs512, SVC)) == "algorithm_not_allowed"


def test_expired_beyond_leeway():
    assert _code(lambda: _verifier(NOW + 600 + LEEWAY + 1).verify(_sign(), SVC)) == "expired_user_context"


def test_issued_in_the_future_or_living_too_long_is_invalid():
    assert _code(lambda: _verifier(NOW - LEEWAY - 1).verify(_sign(), SVC)) == "invalid_user_context"
    assert _code(lambda: _verifier().verify(_sign(ttl_s=MAX_TTL + 1), SVC)) == "invalid_user_context"


def test_wrong_or_missing_audience():
    assert _code(lambda: _verifier().verify(_sign(audience="other"), SVC)) == "wrong_audience"
    assert _code(lambda: _verifier().verify(_forge(_claims(aud=...)), SVC)) == "invalid_user_context"


def test_token_for_service_a_presented_by_service_b_is_rejected():
    intranet = ServiceIdentity("intranet", tenants=frozenset({"acme"}))
    assert _code(lambda: _verifier().verify(_sign(), intranet)) == "user_context_not_bound_to_caller"
    # signed with portal's own key but naming another svc: refused too
    assert _code(lambda: _verifier().verify(_forge(_claims(svc="intranet")), SVC)) == "user_context_not_bound_to_caller"


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
    admin_token = add_credential(path, "ops", [ALL_TENANTS], admin=True)
    token = add_credential(path, "portal", ["acme", "globex"])
    return path, admin_token, token


def test_credentials_file_is_0600_and_holds_only_hashes(tmp_path):
    path, admin_token, token = _store(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    text = path.read_text()
    assert admin_token not in text and token not in text
    assert hashlib.sha256(token.encode()).hexdigest() in text
    assert [(e["id"], e["tenants"]) for e in json.loads(text)["services"]] == [("ops", ["*"]), ("portal", ["acme", "globex"])]


def test_credential_auth_good_bad_missing_wrong_scheme(tmp_path):
    path, admin_token, token = _store(tmp_path)
    config_entry = ServiceCredential(id="batch", token_sha256=hashlib.sha256(b"from-config").hexdigest(),
                                     tenants=["acme"])
    store = CredentialStore([config_entry], path)
    assert store.authenticate(f"Bearer {token}") == ServiceIdentity("portal", False, frozenset({"acme", "globex"}))
    ops = store.authenticate(f"bearer  {admin_token} ")
    assert ops.platform_admin and ops.may_act_for("anything")
    assert store.authenticate("Bearer from-config") == ServiceIdentity("batch", False, frozenset({"acme"}))
    assert _code(lambda: store.authenticate(None)) == "missing_credential"
    assert _code(lambda: store.authenticate("  ")) == "missing_credential"
    assert _code(lambda: store.authenticate("Bearer nope")) == "invalid_credential"
    assert _code(lambda: store.authenticate(f"Basic {token}")) == "invalid_credential"
    assert _code(lambda: store.authenticate(token)) == "invalid_credential"
    assert _code(lambda: CredentialStore([]).authenticate(f"Bearer {token}")) == "invalid_credential"


def test_a_credential_names_its_tenants_and_star_only_alone(tmp_path):
    path = tmp_path / "credentials.json"
    with pytest.raises(ValueError):
        add_credential(path, "portal", [])
    with pytest.raises(ValueError):
        add_credential(path, "portal", ["*", "acme"])
    legacy = ServiceIdentity("old")  # a credential from before tenant scopes acts for nobody
    assert not legacy.may_act_for("acme") and not legacy.platform_admin


def test_revocation_and_expiry_reach_a_live_store(tmp_path):
    path, _, token = _store(tmp_path)
    clock = [NOW]
    store = CredentialStore([], path, clock=lambda: clock[0])
    expiring = add_credential(path, "batch", ["acme"], expires_at=NOW + 60)
    assert store.authenticate(f"Bearer {expiring}").id == "batch"
    clock[0] = NOW + 60
    assert _code(lambda: store.authenticate(f"Bearer {expiring}")) == "credential_expired"
    assert store.authenticate(f"Bearer {token}").id == "portal"
    assert [c.id for c in revoke_credentials(path, "portal")] == ["portal"]
    assert _code(lambda: store.authenticate(f"Bearer {token}")) == "credential_revoked"
    assert revoke_credentials(path, "portal") == []  # already revoked


def test_revoke_by_fingerprint_touches_one_token(tmp_path):
    path = tmp_path / "credentials.json"
    old, new = add_credential(path, "portal", ["acme"]), add_credential(path, "portal", ["acme"])
    first = read_credentials_file(path)[0]
    revoke_credentials(path, fingerprint_prefix=fingerprint(first))
    store = CredentialStore([], path)
    assert _code(lambda: store.authenticate(f"Bearer {old}")) == "credential_revoked"
    assert store.authenticate(f"Bearer {new}").id == "portal"


def test_corrupt_credentials_file_fails_closed(tmp_path):
    path = tmp_path / "credentials.json"
    path.write_text('{"services": [{"id": "x"}]}')
    with pytest.raises(CitadelError) as info:
        read_credentials_file(path)
    assert info.value.code == "invalid_credentials_file"


# ----------------------------------------------------------------------------- keys

def test_service_key_created_0600_in_0700_dir_stable_and_rotated(tmp_path):
    path = tmp_path / "secrets" / "service_keys.json"
    with pytest.raises(CitadelError) as info:
        current_service_key(path, "portal")
    assert info.value.code == "signing_key_missing"
    key = current_service_key(path, "portal", create=True)
    assert len(key.secret_bytes) == 32 and current_service_key(path, "portal", create=True) == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert {p.name for p in path.parent.iterdir()} == {"service_keys.json", "service_keys.json.lock"}
    newer = add_service_key(path, "portal", now=key.created_at + 1)
    assert current_service_key(path, "portal") == newer
    assert {k.kid for k in read_service_keys(path)} == {key.kid, newer.kid}
    assert retire_service_key(path, key.kid) == key and retire_service_key(path, key.kid) is None


def test_key_ring_sees_rotation_and_retirement_without_restart(tmp_path):
    path = tmp_path / "service_keys.json"
    ring = KeyRing(path)
    old = add_service_key(path, "portal", now=NOW)
    verifier = UserContextVerifier(ring, AUD, MAX_TTL, LEEWAY, clock=lambda: NOW)
    old_token = _sign(old)
    new = add_service_key(path, "portal", now=NOW + 1)
    assert verifier.verify(old_token, SVC) == verifier.verify(_sign(new), SVC)  # both valid at once
    retire_service_key(path, old.kid)
    assert _code(lambda: verifier.verify(old_token, SVC)) == "unknown_key"


def test_a_jwks_with_private_or_symmetric_keys_is_refused(tmp_path):
    jwks = tmp_path / "jwks.json"
    provider = IdentityProviderConfig(issuer="https://idp", jwks_file=jwks, services=["portal"])
    for bad in ({"kty": "oct", "kid": "s", "k": "c2VjcmV0"},
                {"kty": "OKP", "crv": "Ed25519", "kid": "e", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
                 "d": "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"},
                {"kty": "OKP", "crv": "Ed25519", "kid": "e", "alg": "HS256",
                 "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}):
        jwks.write_text(json.dumps({"keys": [bad]}))
        with pytest.raises(CitadelError) as info:
            KeyRing(None, [provider]).find("e")
        assert info.value.code == "invalid_jwks"


# ----------------------------------------------------------------------------- facade

def test_authenticator_end_to_end_tenant_scope_and_admin(tmp_path):
    config = CitadelConfig(home=tmp_path)
    config.identity.credentials_file = tmp_path / "secrets" / "credentials.json"
    _, admin_token, token = _store(tmp_path)
    key = current_service_key(config.service_keys_path, "portal", create=True)
    auth = Authenticator.from_config(config, clock=lambda: NOW)
    service, principal = auth.authenticate(f"Bearer {token}", _sign(key))
    assert service.id == "portal" and principal.groups == frozenset({"staff", "hr"})
    with pytest.raises(Forbidden) as info:
        auth.authenticate(f"Bearer {token}", _sign(key, tenant="initech"))
    assert info.value.code == "tenant_not_allowed"
    assert _code(lambda: auth.authenticate(f"Bearer {token}", None)) == "missing_user_context"
    assert _code(lambda: auth.authenticate(f"Bearer {admin_token}", _sign(key))) == "user_context_not_bound_to_caller"
    assert _code(lambda: auth.authenticate(None, _sign(key))) == "missing_credential"
    assert auth.require_admin(f"Bearer {admin_token}").id == "ops"
    with pytest.raises(Forbidden) as info:
        auth.require_admin(f"Bearer {token}")
    assert info.value.code == "admin_required"


# ----------------------------------------------------------------------------- CLI

@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args), catch_exceptions=False)


def test_cli_token_verifies_with_the_service_key(cli):
    result = cli("token", "--tenant", "acme", "--user", "ann", "--groups", "staff, hr", "--service", "portal")
    assert result.exit_code == 0, result.output
    config = load_config()
    verifier = UserContextVerifier(KeyRing.from_config(config), config.identity.audience, config.identity.max_ttl_s,
                                   config.identity.leeway_s)
    principal = verifier.verify(result.stdout.strip(), SVC)
    assert principal == Principal("acme", "ann", frozenset({"staff", "hr"}))
    ttl = str(config.identity.max_ttl_s + 1)
    too_long = cli("token", "--tenant", "a", "--user", "u", "--service", "s", "--ttl", ttl)
    assert too_long.exit_code == 2


def test_cli_credentials_add_list_revoke_and_keys(cli):
    assert cli("credentials", "add", "ops", "--admin").exit_code == 2  # no tenants: refused, never "all"
    result = cli("credentials", "add", "ops", "--admin", "--all-tenants")
    assert result.exit_code == 0, result.output
    secret = result.stdout.strip()
    config = load_config()
    assert secret not in config.credentials_path.read_text()
    store = CredentialStore.from_config(config)
    assert store.authenticate(f"Bearer {secret}") == ServiceIdentity("ops", True, frozenset({"*"}))
    assert cli("credentials", "add", "app", "--tenants", "acme,globex", "--expires-in", "30d").exit_code == 0
    listed = json.loads(cli("credentials", "list").stdout)
    assert [(e["id"], e["admin"], e["tenants"], e["source"]) for e in listed] == [
        ("ops", True, ["*"], "file"), ("app", False, ["acme", "globex"], "file")]
    assert len(listed[0]["fingerprint"]) < 64 and listed[1]["expires_at"] is not None
    assert cli("credentials", "revoke", "ops").exit_code == 0
    assert _code(lambda: store.authenticate(f"Bearer {secret}")) == "credential_revoked"
    assert cli("credentials", "revoke", "ops").exit_code == 2  # nothing left to revoke
    rotated = json.loads(cli("credentials", "rotate-key", "app").stdout)
    assert current_service_key(config.service_keys_path, "app").kid == rotated["kid"]
    assert cli("credentials", "retire-key", rotated["kid"]).exit_code == 0
    assert cli("credentials", "retire-key", rotated["kid"]).exit_code == 2


def test_a_credentials_file_corrupted_while_serving_refuses_every_caller_without_leaking_its_path(tmp_path):
    config = CitadelConfig(home=tmp_path)
    token = add_credential(config.credentials_path, "portal", ["acme"])
    key = current_service_key(config.service_keys_path, "portal", create=True)
    auth = Authenticator.from_config(config, clock=lambda: NOW)
    assert auth.authenticate(f"Bearer {token}", _sign(key))[0].id == "portal"
    config.credentials_path.write_text("{not json")
    with pytest.raises(CitadelError) as info:
        auth.authenticate(f"Bearer {token}", _sign(key))
    assert info.value.code == "identity_unavailable" and str(tmp_path) not in str(info.value)
