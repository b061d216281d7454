"""`citadel eval judge`: Cohen's kappa, the threshold chosen on the dev half and the report on a tiny set."""

from __future__ import annotations

import json

import pytest

from citadel.eval import judge
from citadel.eval.judge import NOT_SUPPORTED as N
from citadel.eval.judge import SUPPORTED as S
from citadel.eval.judge import JudgedClaim


def test_kappa_of_perfect_agreement_is_one():
    assert judge.cohen_kappa([S, N, S, N], [S, N, S, N]) == 1.0


def test_kappa_of_textbook_example():
    # 50 items: both yes 20, A yes B no 5, A no B yes 10, both no 15 -> po 0.7, pe 0.5, kappa 0.4
    a = [S] * 20 + [S] * 5 + [N] * 10 + [N] * 15
    b = [S] * 20 + [N] * 5 + [S] * 10 + [N] * 15
    assert judge.cohen_kappa(a, b) == pytest.approx(0.4)


def test_kappa_matches_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    a = [S, S, N, N, S, N, S, S, N, S]
    b = [S, N, N, S, S, N, S, S, S, S]
    assert judge.cohen_kappa(a, b) == pytest.approx(metrics.cohen_kappa_score(a, b))


def test_kappa_of_systematic_disagreement_is_negative():
    assert judge.cohen_kappa([S, N, S, N], [N, S, N, S]) == -1.0


def test_kappa_edge_cases():
    assert judge.cohen_kappa([], []) is None
    assert judge.cohen_kappa([S, S], [S, S]) is None  # one label throughout: chance agreement is 1
    with pytest.raises(ValueError):
        judge.cohen_kappa([S], [S, N])


def test_confusion_counts_supported_as_positive():
    assert judge.confusion([S, S, N, N], [S, N, S, N]) == {"tp": 1, "fn": 1, "fp": 1, "tn": 1}


def test_support_probability_is_the_best_sentence_or_the_whole_source():
    def score(claim, texts):
        return [0.9 if "ten" in t and "." not in t[:-1] else 0.2 for t in texts]

    assert judge.support_probability(score, "c", "A limit of ten.\nOther text here.") == 0.9


def test_dev_half_is_even_ids():
    assert judge.is_dev("jc002") and not judge.is_dev("jc003") and not judge.is_dev("x")


def rows_where_the_judge_separates_at(cut: float) -> list[JudgedClaim]:
    """Eight items: annotators agree on all but one; probabilities above `cut` are supported ones."""
    labels = [(S, S), (S, S), (N, N), (N, N), (S, S), (N, N), (S, N), (S, S)]
    probabilities = [cut + 0.2, cut + 0.1, cut - 0.2, cut - 0.1, cut + 0.3, cut - 0.3, cut + 0.05, cut + 0.25]
    return [JudgedClaim(f"jc{n:03d}", a, b, p) for n, ((a, b), p) in enumerate(zip(labels, probabilities), start=1)]


def test_threshold_is_chosen_on_dev_and_reported_on_both_halves():
    rows = rows_where_the_judge_separates_at(0.7)
    result = judge.report(rows, "fake")
    assert 0.6 < result["threshold"] <= 0.8
    assert result["dev"]["kappa_judge_consensus"] == 1.0
    assert result["test"]["kappa_judge_consensus"] == 1.0
    assert result["all"]["consensus_items"] == 7
    assert result["all"]["confusion_vs_consensus"] == {"tp": 4, "fp": 0, "fn": 0, "tn": 3}
    assert result["trusted"] is True
    assert result["all"]["kappa_a_b"] == pytest.approx(judge.cohen_kappa(
        [r.annotator_a for r in rows], [r.annotator_b for r in rows]), abs=1e-3)


def test_a_given_threshold_is_used_as_is():
    result = judge.report(rows_where_the_judge_separates_at(0.5), "fake", threshold=0.95)
    assert result["threshold"] == 0.95 and result["threshold_from"] == "given"
    assert result["all"]["confusion_vs_consensus"]["tp"] == 0
    assert result["trusted"] is False


def write_set(tmp_path, labels: dict[str, tuple[str, str]] | None):
    claims = [{"id": "jc001", "tenant": "t", "question": "q", "claim": "The limit is ten days.",
               "source_title": "T", "source_heading": "H", "source_text": "The limit is ten days. Ask first."},
              {"id": "jc002", "tenant": "t", "question": "q", "claim": "Lunch is free on Fridays.",
               "source_title": "T", "source_heading": "H", "source_text": "The office opens at nine."}]
    (tmp_path / "claims.jsonl").write_text("".join(json.dumps(c) + "\n" for c in claims))
    if labels is not None:
        (tmp_path / "labels.jsonl").write_text("".join(
            json.dumps({"id": i, "annotator_a": a, "annotator_b": b}) + "\n" for i, (a, b) in labels.items()))
    return tmp_path / "claims.jsonl", tmp_path / "labels.jsonl"


def test_run_reads_the_files_and_scores_with_the_reader(tmp_path):
    from citadel.reader.fake import FakeReader

    claims, labels = write_set(tmp_path, {"jc001": (S, S), "jc002": (N, S)})
    reader = FakeReader()
    result = judge.run(reader.score, reader.model_id, claims, labels)
    assert result["labeled"] == 2 and result["claims"] == 2
    assert result["test"]["confusion_vs_consensus"]["tp"] == 1  # jc001 (odd: test) supported by both
    assert "kappa judge vs consensus" in judge.format_report(result)


def test_missing_labels_say_what_to_do(tmp_path):
    claims, labels = write_set(tmp_path, None)
    with pytest.raises(judge.LabelsMissing, match="annotators label"):
        judge.run(lambda c, t: [0.5] * len(t), "x", claims, labels)


def test_bad_label_is_rejected(tmp_path):
    claims, labels = write_set(tmp_path, {"jc001": (S, "maybe")})
    with pytest.raises(ValueError, match="maybe"):
        judge.run(lambda c, t: [0.5] * len(t), "x", claims, labels)


def test_cli_without_labels_exits_with_the_message(tmp_path):
    from typer.testing import CliRunner

    from citadel.cli.main import app

    claims, labels = write_set(tmp_path, None)
    result = CliRunner().invoke(app, ["eval", "judge", "--claims", str(claims), "--labels", str(labels)])
    assert result.exit_code == 2
    assert "no labels at" in result.output


def test_cli_prints_the_report_as_json(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from citadel.cli.main import app

    monkeypatch.setenv("CITADEL_ANSWER__READER", "fake")
    claims, labels = write_set(tmp_path, {"jc001": (S, S), "jc002": (N, N)})
    result = CliRunner().invoke(app, ["eval", "judge", "--claims", str(claims), "--labels", str(labels), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["labeled"] == 2


def test_origins_beside_the_claims_give_a_breakdown(tmp_path):
    claims, labels = write_set(tmp_path, {"jc001": (S, S), "jc002": (N, N)})
    (tmp_path / "origins.jsonl").write_text('{"id": "jc001", "origin": "real"}\n{"id": "jc002", "origin": "other_source"}\n')
    result = judge.run(lambda c, t: [0.9 if "ten" in x else 0.1 for x in t], "x", claims, labels, 0.5,
                       tmp_path / "origins.jsonl")
    assert result["by_origin"] == {"other_source": {"items": 1, "judge_supported": 0.0, "consensus_supported": 0.0},
                                   "real": {"items": 1, "judge_supported": 1.0, "consensus_supported": 1.0}}
    assert "origin real" in judge.format_report(result)


def test_the_figure_check_goes_before_the_judge_as_answers_meet_it():
    from citadel.eval.judge import support_probability

    source = "Eligible customers receive a multi-year discount of up to 12% on the committed term."
    always = lambda claim, texts: [0.9 for _ in texts]  # noqa: E731 - a judge that believes everything
    assert support_probability(always, "The discount is up to 18% [1].", source) == 0.9
    assert support_probability(always, "The discount is up to 18% [1].", source, figures=True) == 0.0
    assert support_probability(always, "The discount is up to 12% [1].", source, figures=True) == 0.9
