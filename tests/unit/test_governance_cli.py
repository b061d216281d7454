"""The CLI shows what a citation opens and the catalog's governance of it, and `citadel purge-logs`
withdraws the documents past their retention class (fake embedder, no Ray)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from citadel.cli.main import app

HOTEL = "# Hotel policy\n\n## Limit\n\nThe hotel limit is 220 USD per night in every city we travel to.\n"
MEMO = "---\neffective_date: 2001-01-01\n---\n# Parking memo\n\n## Permits\n\nParking permits for the old garage expire at the end of the lease.\n"
ACL = """default: [staff]
governance:
  hotel: {policy_id: TRV-9, policy_revision: "1", sensitivity: internal, retention_class: standard}
  memo: {retention_class: short}
"""


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CITADEL_EMBEDDING__BACKEND", "hash")
    monkeypatch.setenv("CITADEL_ANSWER__CONFIRM", "false")
    monkeypatch.setenv("CITADEL_INGEST_PIPELINE__ENGINE", "local")  # unit tests never start Ray
    runner = CliRunner()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "hotel.md").write_text(HOTEL)
    (docs / "memo.md").write_text(MEMO)
    (tmp_path / "acl.yaml").write_text(ACL)
    # the operator trusts front matter (the memo's effective date); governance is the ACL file's alone
    result = runner.invoke(app, ["ingest", "--tenant", "acme", "--acl", str(tmp_path / "acl.yaml"),
                                 "--trust-front-matter", str(docs)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return lambda *args: runner.invoke(app, list(args), catch_exceptions=False)


def test_ask_prints_each_citation_s_link_and_governance(cli):
    result = cli("ask", "--tenant", "acme", "--user", "u", "--groups", "staff", "What is the hotel limit per night?")
    assert result.exit_code == 0, result.output
    assert "policy TRV-9 rev 1, internal" in result.output
    assert "open: /v1/documents/hotel/versions/1/sections/acme:hotel:v1:0000" in result.output


def test_purge_logs_withdraws_documents_past_their_retention_class(cli):
    # the memo took effect in 2001 and `short` keeps a year; the hotel policy (`standard`, seven years from
    # its publication today) stays
    purged = json.loads(cli("purge-logs").stdout.strip().splitlines()[-1])["documents_purged"]
    assert purged == [{"tenant_id": "acme", "document_id": "memo", "retention_class": "short"}]
    result = cli("retrieve", "--tenant", "acme", "--user", "u", "--groups", "staff", "--json", "parking permits hotel")
    assert {p["document_id"] for p in json.loads(result.stdout)["passages"]} == {"hotel"}
    assert json.loads(cli("purge-logs").stdout.strip().splitlines()[-1])["documents_purged"] == []
