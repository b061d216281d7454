"""Kept prompts (citadel/guardrails/prompt_vault.py, prompt_keys.py): encrypted, bound to their
request, decrypted by their own kid after a rotation, purged by age, read only with an audit row."""

from __future__ import annotations

import base64
import os
import stat

import pytest

from citadel.catalog.sqlite import SQLiteCatalog
from citadel.guardrails.prompt_keys import (KEYS_FILE_NAME, PromptKeysUnavailable, keyring_for, keyring_from_env,
                                            rotate_file_key)
from citadel.guardrails.prompt_vault import PROMPT_READ, PromptUnreadable, PromptVault, read_audited

PROMPT = [{"role": "system", "content": "Answer from the sources."},
          {"role": "user", "content": "Hotel limit? I am jane.doe@example.com"}]


@pytest.fixture
def catalog(tmp_path):
    catalog = SQLiteCatalog(tmp_path / "catalog.sqlite")
    yield catalog
    catalog.close()


def test_the_keys_file_is_made_on_first_use_owner_only(tmp_path):
    keyring = keyring_for(tmp_path / "secrets", environ={})
    path = tmp_path / "secrets" / KEYS_FILE_NAME
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert keyring_for(tmp_path / "secrets", environ={}).current == keyring.current  # read, not made again


def test_a_kms_variable_wins_over_the_file_newest_kid_last(tmp_path):
    one, two = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))
    keyring = keyring_for(tmp_path, environ={"CITADEL_PROMPT_KEYS": f"k1:{one}, k2:{two}"})
    assert keyring.current == "k2" and set(keyring.keys) == {"k1", "k2"}
    assert not (tmp_path / KEYS_FILE_NAME).exists()
    with pytest.raises(PromptKeysUnavailable):
        keyring_from_env("k1:not-base64!")
    with pytest.raises(PromptKeysUnavailable):
        keyring_from_env(f"k1:{base64.b64encode(b'short').decode()}")


def test_put_get_round_trip_is_ciphertext_at_rest(tmp_path, catalog):
    vault = PromptVault(catalog, keyring_for(tmp_path / "secrets", environ={}))
    vault.put("r1", "acme", "alice", PROMPT, "The limit is 180 USD [1].")
    kept = vault.get("r1")
    assert (kept.prompt, kept.reply, kept.tenant_id, kept.user_id) == (PROMPT, "The limit is 180 USD [1].", "acme",
                                                                       "alice")
    row = catalog.kept_prompt("r1")
    assert b"jane.doe" not in row["ciphertext"] and b"180 USD" not in row["ciphertext"]
    assert vault.get("missing") is None


def test_old_records_decrypt_with_their_kid_after_a_rotation(tmp_path, catalog):
    secrets = tmp_path / "secrets"
    old = PromptVault(catalog, keyring_for(secrets, environ={}))
    old.put("before", "acme", "alice", PROMPT, "old")
    rotated = rotate_file_key(secrets / KEYS_FILE_NAME)
    new = PromptVault(catalog, rotated)
    new.put("after", "acme", "alice", PROMPT, "new")
    assert catalog.kept_prompt("after")["kid"] == rotated.current != catalog.kept_prompt("before")["kid"]
    assert new.get("before").reply == "old" and new.get("after").reply == "new"


def test_a_ciphertext_moved_to_another_request_does_not_decrypt(tmp_path, catalog):
    vault = PromptVault(catalog, keyring_for(tmp_path, environ={}))
    vault.put("r1", "acme", "alice", PROMPT, "x")
    row = catalog.kept_prompt("r1")
    catalog.keep_prompt("r2", "acme", "mallory", row["kid"], row["nonce"], row["ciphertext"])
    with pytest.raises(PromptUnreadable):
        vault.get("r2")


def test_purge_forgets_by_age(tmp_path, catalog):
    vault = PromptVault(catalog, keyring_for(tmp_path, environ={}))
    vault.put("r1", "acme", "alice", PROMPT, "x")
    assert vault.purge(older_than=3600) == 0 and vault.get("r1") is not None
    assert vault.purge(older_than=-1) == 1 and vault.get("r1") is None


def test_every_read_writes_an_audit_row(tmp_path, catalog):
    vault = PromptVault(catalog, keyring_for(tmp_path, environ={}))
    vault.put("r1", "acme", "alice", PROMPT, "x")
    assert read_audited(vault, catalog, "ops", "r1", "api").reply == "x"
    assert read_audited(vault, catalog, "ops", "missing", "api") is None
    [row] = [a for a in catalog.audit_log() if a["action"] == PROMPT_READ]
    assert (row["actor"], row["tenant_id"], row["target"], row["detail"]) == ("ops", "acme", "r1",
                                                                              {"user_id": "alice", "via": "api"})
