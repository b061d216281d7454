"""The CLI end to end on the fake embedder: ingest, retrieve --json, acl set, withdraw, tenants."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from citadel.cli.main import app

DOC = "# Hotel policy\n\n## Limit\n\nThe hotel limit is 220 USD per night.\n"


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CITADEL_EMBEDDING__BACKEND", "hash")
    monkeypatch.setenv("CITADEL_INGEST_PIPELINE__ENGINE", "local")  # unit tests never start Ray
    runner = CliRunner()

    def run(*args: str):
        result = runner.invoke(app, list(args), catch_exceptions=False)
        return result

    return run


def test_ingest_retrieve_acl_withdraw(cli, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "hotel.md").write_text(DOC)
    result = cli("ingest", "--tenant", "acme", "--groups", "staff", str(docs))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["published"] == 1

    result = cli("retrieve", "--tenant", "acme", "--user", "u", "--groups", "staff", "--json", "hotel limit")
    payload = json.loads(result.stdout)
    assert set(payload) == {"request_id", "plan", "degraded", "passages"}
    assert payload["plan"] == "exact"
    passage = payload["passages"][0]
    assert passage["chunk_id"] == "acme:hotel:v1:0000"
    assert passage["source"].endswith("hotel.md") and passage["heading"] == "Hotel policy > Limit"

    assert cli("acl", "set", "--tenant", "acme", "--doc", "hotel", "--groups", "exec").exit_code == 0
    result = cli("retrieve", "--tenant", "acme", "--user", "u", "--groups", "staff", "--json", "hotel limit")
    assert json.loads(result.stdout)["passages"] == []

    assert cli("withdraw", "--tenant", "acme", "--doc", "hotel").exit_code == 0
    result = cli("retrieve", "--tenant", "acme", "--user", "u", "--groups", "exec", "--json", "hotel limit")
    assert json.loads(result.stdout)["passages"] == []

    tenants = json.loads(cli("tenants", "--json").stdout)
    assert tenants[0]["tenant_id"] == "acme" and tenants[0]["tier"] == "tiny"


def test_ingest_needs_exactly_one_acl_source(cli, tmp_path):
    (tmp_path / "a.md").write_text(DOC)
    assert cli("ingest", "--tenant", "acme", str(tmp_path / "a.md")).exit_code == 2
    acl = tmp_path / "acl.yaml"
    acl.write_text("default: [staff]\n")
    both = cli("ingest", "--tenant", "acme", "--groups", "x", "--acl", str(acl), str(tmp_path / "a.md"))
    assert both.exit_code == 2


def test_unknown_document_is_a_clear_error(cli):
    result = cli("withdraw", "--tenant", "acme", "--doc", "missing")
    assert result.exit_code == 2
    assert "no document" in result.output


def test_compact_drops_withdrawn_rows_and_refuses_an_empty_tenant(cli, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "hotel.md").write_text(DOC)
    (docs / "taxi.md").write_text(DOC.replace("Hotel", "Taxi").replace("hotel", "taxi"))
    assert cli("ingest", "--tenant", "acme", "--groups", "staff", str(docs)).exit_code == 0
    assert cli("withdraw", "--tenant", "acme", "--doc", "taxi").exit_code == 0
    result = cli("compact", "--tenant", "acme")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["status"] == "succeeded" and report["partition_chunks"] == 1  # the taxi row is gone

    result = cli("compact", "--tenant", "nobody")
    assert result.exit_code == 2 and "nothing published" in result.output
