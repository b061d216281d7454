"""`citadel quality report` (citadel/quality/report.py): the worst topics by rephrases, thumbs-down,
verifier pass rate and low best scores, from a small catalog's answer log and feedback."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from citadel.catalog.sqlite import SQLiteCatalog
from citadel.cli.main import app
from citadel.quality.report import NOTHING_FOUND, report_from_catalog, to_markdown, topic_of

HOTEL = "travel › Hotel limit"
VACATION = "leave › Vacation"


def answer(document: str | None, heading: str | None, score: float | None, kept: int = 1, removed: int = 0,
           **extra) -> dict:
    citations = [{"document_id": document, "heading": heading, "version": 1}] if heading else []
    return {"citations": citations, "passages": [{"document_id": document}] if document else [],
            "gate": {"vector_score": score}, "verification": {"claims": kept + removed, "kept": kept,
                                                                "removed": removed, "corrected": 0}, **extra}


@pytest.fixture
def home(tmp_path):
    catalog = SQLiteCatalog(tmp_path / "home" / "catalog.sqlite")
    for tenant in ("acme", "globex"):
        catalog.ensure_tenant(tenant)
    log = [("a1", answer("travel", "Hotel limit", 0.6, kept=2)),
           ("a2", answer("travel", "Hotel limit", 0.62, rephrase_of="a1")),  # a1 did not help
           ("a3", answer("leave", "Vacation", 0.2, kept=1, removed=1)),  # low score, a claim removed
           ("a4", {**answer("travel", None, 0.1, kept=0), "refused": True}),  # a refusal near travel, low score
           ("a5", answer("leave", "Vacation", 0.7)),
           ("a6", answer("leave", "Vacation", 0.71, rephrase_of="a5"))]
    for request_id, entry in log:
        catalog.log_answer(request_id, "acme", "alice", "a question", entry)
    catalog.log_answer("g1", "globex", "gina", "q", answer("wiki", "Home", 0.1))
    for answer_id, vote, reason in (("a1", "down", "wrong_source"), ("a3", "down", "outdated"), ("a5", "up", None)):
        catalog.record_feedback(answer_id, "acme", "alice", vote, reason, "", [])
    yield catalog
    catalog.close()


def test_topics_are_ranked_worst_first_with_each_signal(home):
    report = report_from_catalog(home, ["acme"], 7, low_best_score=0.35, max_rows=100, now=time.time())
    rows = {t.topic: t for t in report.topics}
    assert [t.topic for t in report.topics] == [VACATION, "travel", HOTEL]
    vacation, hotel, refusal = rows[VACATION], rows[HOTEL], rows["travel"]
    assert (vacation.answers, vacation.flagged, vacation.rephrased, vacation.thumbs_down, vacation.votes) == (3, 2, 1,
                                                                                                          1, 2)
    assert dict(vacation.down_reasons) == {"outdated": 1}
    assert (vacation.claims, vacation.claims_kept, vacation.scored, vacation.low_best_score) == (4, 3, 3, 1)
    assert (hotel.answers, hotel.flagged, hotel.rephrased, hotel.thumbs_down) == (2, 1, 1, 1)
    assert (refusal.answers, refusal.flagged, refusal.low_best_score) == (1, 1, 1)
    totals = report.totals()
    assert (totals["answers"], totals["flagged"], totals["rephrased"], totals["thumbs_down"], totals["votes"]) == (
        6, 4, 2, 2, 3)
    assert totals["verifier_pass_rate"] == round(6 / 7, 4)


def test_a_tenant_sees_only_its_rows_and_the_period_bounds_them(home):
    globex = report_from_catalog(home, ["globex"], 7, 0.35, 100, time.time())
    assert [(t.tenant, t.topic, t.low_best_score) for t in globex.topics] == [("globex", "wiki › Home", 1)]
    later = report_from_catalog(home, ["acme"], 1, 0.35, 100, time.time() + 2 * 86_400)
    assert later.topics == [] and "No answers were logged" in to_markdown(later, 10)


def test_the_read_limit_is_named(home):
    report = report_from_catalog(home, ["acme", "globex"], 7, 0.35, max_rows=2, now=time.time())
    assert report.truncated == ["acme"] and report.rows_read == 3
    assert "read limit was reached for acme" in to_markdown(report, 10)


def test_the_topic_is_the_first_cited_section_else_the_closest_document():
    assert topic_of({"citations": [{"document_id": "d", "heading": "H | 2"}]}) == "d › H | 2"
    assert topic_of({"citations": [], "passages": [{"document_id": "d"}]}) == "d"
    assert topic_of({"citations": None, "passages": []}) == NOTHING_FOUND


def test_the_cli_prints_a_markdown_table_or_json(home, tmp_path, monkeypatch):
    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CITADEL_EMBEDDING__BACKEND", "hash")
    table = CliRunner().invoke(app, ["quality", "report", "--tenant", "acme"])
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| Tenant | Topic"))
    assert lines[header + 2].startswith(f"| acme | {VACATION} | 3 | 2 | 1 | 1 of 2 (outdated 1) | 75% of 4 | 1 of 3 |")
    everyone = json.loads(CliRunner().invoke(app, ["quality", "report", "--json", "--days", "7", "--top", "2"]).stdout)
    assert everyone["totals"]["answers"] == 7 and len(everyone["topics"]) == 2
    assert everyone["topics"][0]["topic"] == VACATION
    assert CliRunner().invoke(app, ["quality", "report", "--tenant", "no such/tenant"]).exit_code == 2
