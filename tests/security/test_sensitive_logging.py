"""Refused sensitive questions are never logged verbatim.

Before: a question refused as `sensitive_data` (a card number, a password) was stored word for word in
the answer log (and its refusal cached under a key derived from it) while the reply told the user it
"was not processed or stored". Now the log keeps the row (the audit is complete) with the question
withheld, spans never carry the sensitive text, and retention is enforced by a purge job
(`citadel purge-logs`), not only on the request path. Driven through the HTTP app and the CLI.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time

from typer.testing import CliRunner

from tests.integration.conftest import make_home
from tests.integration.test_api import client_for

CARD = "4111 1111 1111 1111"
CARD_DIGITS = CARD.replace(" ", "")
PASSWORD = "Tr0ub4dor&3x"
SENSITIVE = {
    CARD_DIGITS: f"My corporate card {CARD} was declined at the hotel, what do I do?",
    PASSWORD: f"my password is {PASSWORD} and it stopped working, what is the reset policy?",
}


def _rows(home) -> list[dict]:
    with sqlite3.connect(home.config.catalog_path) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT * FROM answer_log")]


def _leaks(text: str, secret: str) -> bool:
    return secret in text or secret in text.replace(" ", "").replace("-", "")


def test_a_refused_sensitive_question_is_not_stored_and_the_reply_says_so(tmp_path, caplog):
    home = make_home(tmp_path / "home")
    caplog.set_level(logging.INFO, logger="citadel.trace")
    with client_for(home) as client:
        for secret, question in SENSITIVE.items():
            body = client.post("/v1/answer", json={"question": question}, headers=home.headers()).json()
            assert body["refused"] and body["reason"] == "sensitive_data", body
            assert "not processed or stored" in body["answer"]
            assert not _leaks(body["answer"], secret)
            rows = [r for r in _rows(home) if r["request_id"] == body["request_id"]]
            assert len(rows) == 1, "the refusal is still logged: the audit is complete"
            row = rows[0]
            assert json.loads(row["response"])["reason"] == "sensitive_data"
            assert not any(_leaks(str(value), secret) for value in row.values()), row

            again = client.post("/v1/answer", json={"question": question}, headers=home.headers()).json()
            assert again["cached"] is False  # a refusal keyed by the secret is not kept in the cache either
    spans = [record.getMessage() for record in caplog.records if record.name == "citadel.trace"]
    assert spans, "the answers emitted spans"
    assert not any(_leaks(span, secret) for span in spans for secret in SENSITIVE)


def test_sensitive_data_the_router_let_through_is_not_stored_either(tmp_path):
    """Defence in depth: with no router in front (or a remote one that failed open) the log still
    withholds a question holding a card number, and everything derived from its words."""
    home = make_home(tmp_path / "home")
    with client_for(home) as client:
        client.app.state.services.query.answers.router = None
        question = f"What is the hotel limit per night? My card is {CARD}"
        body = client.post("/v1/answer", json={"question": question}, headers=home.headers()).json()
        [row] = [r for r in _rows(home) if r["request_id"] == body["request_id"]]
        assert not any(_leaks(str(value), CARD_DIGITS) or "4111" in str(value) for value in row.values()), row


def test_a_span_never_carries_sensitive_text_whoever_passes_it():
    from citadel.tracing import emit_span

    span = emit_span("r1", "route", 1.0, note=SENSITIVE[PASSWORD], question=SENSITIVE[CARD_DIGITS])
    assert not any(_leaks(json.dumps(span), secret) for secret in SENSITIVE)
    assert emit_span("r2", "route", 1.0, reason="low_coverage")["reason"] == "low_coverage"


def test_purge_logs_job_deletes_rows_older_than_the_retention(tmp_path, monkeypatch):
    from citadel.cli.main import app

    home = make_home(tmp_path / "home", CITADEL_ANSWER__ANSWER_LOG_RETENTION_DAYS="1")
    with sqlite3.connect(home.config.catalog_path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS answer_log (request_id TEXT PRIMARY KEY, ts REAL NOT NULL,"
                   " tenant_id TEXT NOT NULL, user_id TEXT NOT NULL, question TEXT NOT NULL, response TEXT NOT NULL)")
        for request_id, age_days in (("expired", 3.0), ("recent", 0.1)):
            db.execute("INSERT INTO answer_log (request_id, ts, tenant_id, user_id, question, response)"
                       " VALUES (?, ?, 'acme', 'alice', 'q', '{}')", (request_id, time.time() - age_days * 86_400))
    monkeypatch.setenv("CITADEL_HOME", str(home.config.home))
    monkeypatch.setenv("CITADEL_ANSWER__ANSWER_LOG_RETENTION_DAYS", "1")
    result = CliRunner().invoke(app, ["purge-logs"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["purged"] == 1
    assert [r["request_id"] for r in _rows(home)] == ["recent"]
