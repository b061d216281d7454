"""The PromptStore suite (citadel/guardrails/prompt_vault.py): the prompt vault's store (ciphertext
rows) and the known users, on every catalog backend."""

from __future__ import annotations

import time

import pytest

from citadel.guardrails.prompt_vault import PromptStore


class PromptStoreConformance:
    """Override `backend` with an empty catalog (tests/conformance/suites/catalog.py has the backends)."""

    @pytest.fixture
    def backend(self) -> PromptStore:
        raise NotImplementedError("a conformance subclass provides an empty catalog")

    @pytest.fixture
    def catalog(self, backend):
        yield backend
        backend.close()

    def test_rows_round_trip_as_bytes_newest_first(self, catalog):
        assert isinstance(catalog, PromptStore)
        catalog.keep_prompt("r1", "acme", "alice", "k1", b"\x00" * 12, b"\xff\x00cipher")
        catalog.keep_prompt("r1", "acme", "alice", "k2", b"\x01" * 12, b"newer")
        row = catalog.kept_prompt("r1")
        assert (row["kid"], row["nonce"], row["ciphertext"], row["tenant_id"], row["user_id"]) == (
            "k2", b"\x01" * 12, b"newer", "acme", "alice")
        assert abs(row["ts"] - time.time()) < 60
        assert catalog.kept_prompt("r2") is None

    def test_purge_deletes_only_rows_older_than_the_retention(self, catalog):
        catalog.keep_prompt("r1", "acme", "alice", "k1", b"n" * 12, b"c")
        assert catalog.purge_prompts(3600) == 0
        assert catalog.purge_prompts(-1) == 1 and catalog.kept_prompt("r1") is None

    def test_known_users_are_those_who_asked_or_voted(self, catalog):
        catalog.log_answer("a1", "acme", "alice", "q", {})
        catalog.record_feedback("a1", "acme", "bob", "up", None, "", [])
        assert sorted(catalog.known_users()) == ["alice", "bob"]
