"""The release gate's verdict (citadel/quality/gate.py) and `citadel eval gate` over recorded
measurements: what blocks, what passes, and the reports it writes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from citadel.quality import gate
from citadel.quality.bundle import Bundle

BASE = {"regression": {"citation_accuracy": 0.95, "source_recall": 1.0, "refusal_precision": 0.96,
                       "refusal_recall": 0.97, "unsupported_claim_rate": 0.030, "draft_unsupported_rate": 0.10,
                       "leaks": 0, "forbidden_citations": 0, "errors": 0, "answer_sentences": 120},
        "judge": {"kappa_judge_consensus": 0.72}}


def _with(set_name: str, **figures):
    return {name: ({**values, **figures} if name == set_name else dict(values)) for name, values in BASE.items()}


def test_an_unchanged_candidate_passes():
    report = gate.compare(BASE, BASE, "b-1", "b-1")
    assert not report.blocked
    assert {r.verdict for r in report.rows} == {gate.OK}
    assert report.to_dict()["verdict"] == "passed"


def test_the_seeds_example_is_blocked_though_answers_are_longer():
    """1.4 points more unsupported claims, with more sentences: blocked on that figure alone."""
    candidate = _with("regression", unsupported_claim_rate=0.044, answer_sentences=180)
    report = gate.compare(BASE, candidate, "b-1", "b-2")
    assert report.blocked
    assert [(r.set, r.figure) for r in report.rows if r.verdict == gate.REGRESSED] == [
        ("regression", "unsupported_claim_rate")]


@pytest.mark.parametrize("figure, value", [("citation_accuracy", 0.93), ("refusal_precision", 0.94),
                                           ("refusal_recall", 0.95), ("source_recall", 0.98),
                                           ("draft_unsupported_rate", 0.12)])
def test_each_gated_figure_blocks_beyond_its_margin(figure, value):
    assert gate.compare(BASE, _with("regression", **{figure: value}), "b-1", "b-2").blocked


def test_within_the_margin_and_improvements_pass():
    candidate = _with("regression", citation_accuracy=0.945, unsupported_claim_rate=0.01)
    report = gate.compare(BASE, candidate, "b-1", "b-2")
    assert not report.blocked
    verdicts = {r.figure: r.verdict for r in report.rows if r.set == "regression"}
    assert verdicts["citation_accuracy"] == gate.OK and verdicts["unsupported_claim_rate"] == gate.IMPROVED


def test_a_judge_below_its_margin_blocks_and_any_leak_blocks_whatever_the_baseline():
    assert gate.compare(BASE, _with("judge", kappa_judge_consensus=0.6), "b-1", "b-2").blocked
    leaky = {"regression": {**BASE["regression"], "leaks": 1}}
    assert gate.compare(leaky, leaky, "b-1", "b-1").blocked


def test_margins_can_be_set_and_are_checked():
    candidate = _with("regression", citation_accuracy=0.93)
    assert not gate.compare(BASE, candidate, "b-1", "b-2", margins=gate.parse_margins(["citation_accuracy=0.05"])).blocked
    with pytest.raises(ValueError, match="unknown gated figure"):
        gate.parse_margins(["nonsense=0.1"])
    with pytest.raises(ValueError, match="not negative"):
        gate.parse_margins(["citation_accuracy=-1"])


def test_a_set_the_baseline_lacks_is_reported_not_gated():
    candidate = {**BASE, "runs_parts": {"both_parts_ok": 0.1}}
    report = gate.compare(BASE, candidate, "b-1", "b-2")
    assert not report.blocked
    assert any(r.set == "runs_parts" and r.verdict == gate.NEW for r in report.rows)


def test_the_markdown_report_names_the_bundles_the_change_and_the_regression():
    changes = [{"key": "answer.task_instruction", "old": "Answer in a few sentences.", "new": "Be thorough."}]
    report = gate.compare(BASE, _with("regression", citation_accuracy=0.8), "b-1", "b-2", changes)
    text = report.to_markdown()
    assert "BLOCKED" in text and "`b-1`" in text and "`b-2`" in text
    assert "answer.task_instruction" in text and "**regressed**" in text


def _recorded(path, bundle_sections, sets, subset="fast"):
    path.write_text(json.dumps({"bundle": Bundle(bundle_sections).to_dict(), "subset": subset, "sets": sets}))
    return path


def test_the_command_exits_1_when_blocked_and_writes_both_reports(tmp_path):
    from citadel.cli.main import app

    baseline = _recorded(tmp_path / "base.json", {"answer": {"task_instruction": "a"}}, BASE)
    worse = _recorded(tmp_path / "cand.json", {"answer": {"task_instruction": "b"}},
                      _with("regression", refusal_recall=0.9))
    runner = CliRunner()
    blocked = runner.invoke(app, ["eval", "gate", "--baseline", str(baseline), "--candidate", str(worse),
                                  "--report-dir", str(tmp_path / "out")])
    assert blocked.exit_code == 1, blocked.output
    saved = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert saved["verdict"] == "blocked" and saved["regressions"][0]["figure"] == "refusal_recall"
    assert saved["changes"] == [{"key": "answer.task_instruction", "old": "a", "new": "b"}]
    assert "BLOCKED" in (tmp_path / "out" / "gate.md").read_text()
    same = runner.invoke(app, ["eval", "gate", "--baseline", str(baseline), "--candidate", str(baseline)])
    assert same.exit_code == 0, same.output


def test_the_command_refuses_to_compare_different_subsets(tmp_path):
    from citadel.cli.main import app

    baseline = _recorded(tmp_path / "base.json", {}, BASE, subset="full")
    candidate = _recorded(tmp_path / "cand.json", {}, BASE, subset="fast")
    result = CliRunner().invoke(app, ["eval", "gate", "--baseline", str(baseline), "--candidate", str(candidate)])
    assert result.exit_code == 2
