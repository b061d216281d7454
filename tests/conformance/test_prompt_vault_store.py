"""The prompt vault's store (ciphertext rows) and the known users, on every catalog backend
(SQLite on a file and in memory, Postgres when its binaries are here: tests/conformance/test_catalog_backends.py)."""

from __future__ import annotations

import time

import pytest

from citadel.guardrails.prompt_vault import PromptStore
from tests.conformance.test_catalog_backends import BACKENDS
from tests.postgres_server import postgres_dsn  # noqa: F401  (a session fixture)


@pytest.fixture(params=list(BACKENDS))
def catalog(request, tmp_path):
    catalog = BACKENDS[request.param](request, tmp_path)
    yield catalog
    catalog.close()


def test_rows_round_trip_as_bytes_newest_first(catalog):
    assert isinstance(catalog, PromptStore)
    catalog.keep_prompt("r1", "acme", "alice", "k1", b"\x00" * 12, b"\xff\x00cipher")
    catalog.keep_prompt("r1", "acme", "alice", "k2", b"\x01" * 12, b"newer")
    row = catalog.kept_prompt("r1")
    assert (row["kid"], row["nonce"], row["ciphertext"], row["tenant_id"], row["user_id"]) == (
        "k2", b"\x01" * 12, b"newer", "acme", "alice")
    assert abs(row["ts"] - time.time()) < 60
    assert catalog.kept_prompt("r2") is None


def test_purge_deletes_only_rows_older_than_the_retention(catalog):
    catalog.keep_prompt("r1", "acme", "alice", "k1", b"n" * 12, b"c")
    assert catalog.purge_prompts(3600) == 0
    assert catalog.purge_prompts(-1) == 1 and catalog.kept_prompt("r1") is None


def test_known_users_are_those_who_asked_or_voted(catalog):
    catalog.log_answer("a1", "acme", "alice", "q", {})
    catalog.record_feedback("a1", "acme", "bob", "up", None, "", [])
    assert sorted(catalog.known_users()) == ["alice", "bob"]
