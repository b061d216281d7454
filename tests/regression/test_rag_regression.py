"""The labeled RAG regression set and its CI thresholds.

The fast tests check the set itself and the metric arithmetic. The slow test loads the four handbooks
as four tenants plus the overlay into a fresh home with the REAL MiniLM embedder and the deterministic
extractive generator, answers every item, and fails the build below the thresholds:
citation accuracy >= 0.9, refusal precision and recall >= 0.9, no leaks.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from citadel.eval import rag

REQUIRED_CATEGORIES = {
    "plain_answer", "buried_exception", "superseded", "not_in_documents", "cross_tenant", "acl_restricted",
    "injection", "personal_data", "human_request", "off_topic", "multi_step",
}


# ------------------------------------------------------------------------------- the set itself
def test_the_set_is_large_varied_and_mostly_answerable():
    items = rag.load_set()
    categories = Counter(i.category for i in items)
    assert len(items) >= 150
    assert REQUIRED_CATEGORIES <= set(categories)
    assert len(categories) >= 10
    share = sum(i.answerable for i in items) / len(items)
    assert 0.5 <= share <= 0.7
    assert {i.tenant for i in items} == set(rag.TENANT_CORPORA)


def test_router_items_name_their_reason_and_restricted_items_come_in_pairs():
    items = rag.load_set()
    reasons = {"injection": "prompt_injection", "personal_data": "sensitive_data",
               "human_request": "human_requested", "off_topic": "off_topic"}
    for item in items:
        if item.category in reasons:
            assert item.expect == "refuse" and item.expected_reason == reasons[item.category], item.id
        if item.category in ("superseded", "cross_tenant", "not_in_documents"):
            assert item.expect == ("answer" if item.category == "superseded" else "refuse"), item.id
    restricted = [i for i in items if i.category == "acl_restricted"]
    answered = {i.question for i in restricted if i.answerable}
    refused = {i.question for i in restricted if not i.answerable}
    assert answered == refused  # each question asked with and without the group
    for item in restricted:
        if not item.answerable:
            assert item.must_not_cite_documents, item.id


def test_load_set_rejects_bad_items(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = {"id": "a", "category": "plain_answer", "tenant": "t", "question": "q?", "expect": "answer",
            "expected_documents": ["d"]}
    path.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(ValueError, match="duplicate"):
        rag.load_set(path)
    path.write_text(json.dumps({**good, "expected_documents": []}) + "\n")
    with pytest.raises(ValueError, match="expected_documents"):
        rag.load_set(path)
    path.write_text(json.dumps({**good, "expect": "maybe"}) + "\n")
    with pytest.raises(ValueError, match="expect"):
        rag.load_set(path)


# ------------------------------------------------------------------------------ the arithmetic
def test_sentences_and_support_by_token_overlap():
    answer = "Annual leave accrues at 4 hours per pay period [1]. Award leave is capped at 80 hours [2].\nOk."
    sentences = rag.answer_sentences(answer)
    assert sentences == ["Annual leave accrues at 4 hours per pay period.", "Award leave is capped at 80 hours."]
    passages = ["You accrue annual leave: fewer than 3 years, 4 hours per pay period."]
    assert rag.supported(sentences[0], passages)
    assert not rag.supported(sentences[1], passages)


def _result(item_kwargs, **kwargs):
    item = rag.RagItem(**{"id": "x", "category": "c", "tenant": "t", "user": "u", "groups": (), "question": "q",
                          **item_kwargs})
    defaults = {"refused": False, "reason": None, "cited": [], "retrieved_documents": []}
    return rag.ItemResult(item, **{**defaults, **kwargs})


def test_summary_counts_refusals_citations_and_leaks():
    answer = {"expect": "answer", "expected_documents": ("d1",)}
    refuse = {"expect": "refuse", "expected_reason": "off_topic"}
    results = [
        _result(answer, cited_correctly=True, source_found=True, sentences=2, unsupported=1),
        _result(answer, refused=True, reason="low_coverage"),
        _result(refuse, refused=True, reason="off_topic"),
        _result(refuse, refused=True, reason="low_coverage"),
        _result(refuse, leaks=["t2:doc:v1:0000 (tenant t2)"], sentences=2),
    ]
    report = rag.summarise(results)
    assert report["citation_accuracy"] == 0.5
    assert report["source_recall"] == 0.5
    assert report["refusal_precision"] == round(2 / 3, 4)
    assert report["refusal_recall"] == round(2 / 3, 4)
    assert report["refusal_reason_accuracy"] == 0.5
    assert report["unsupported_claim_rate"] == 0.25
    assert report["leaks"] == 1
    assert report["categories"]["c"]["passed"] == 2
    assert len(report["failures"]) == 3
    assert rag.threshold_failures(report)


def test_precision_recall_and_reciprocal_rank_on_a_tiny_ranking():
    from citadel.eval.metrics import mrr_at_k, precision_at_k, recall_at_k

    ranked = ["x", "a", "y", "b", "z"]
    relevant = {"a": 1, "b": 1, "c": 1}
    assert precision_at_k(ranked, relevant, 4) == 0.5
    assert precision_at_k(ranked[:2], relevant, 4) == 0.25  # a short list is not excused
    assert recall_at_k(ranked, relevant, 2) == pytest.approx(1 / 3)
    assert recall_at_k(ranked, relevant, 5) == pytest.approx(2 / 3)
    assert mrr_at_k(ranked, relevant, 5) == 0.5
    assert mrr_at_k(ranked, relevant, 1) == 0.0


def _passage(chunk_id, document_id, heading):
    from types import SimpleNamespace

    return SimpleNamespace(chunk_id=chunk_id, document_id=document_id, heading=heading)


def test_retrieval_scores_count_the_expected_section_once_for_recall_and_per_passage_for_precision():
    item = rag.RagItem("x", "c", "t", "u", (), "q", "answer", expected_documents=("leave",),
                       expected_heading="Annual leave")
    ranking = [_passage("t:other:v1:0000", "other", "Other"),
               _passage("t:leave:v1:0003", "leave", "Leave > Annual leave"),
               _passage("t:leave:v1:0004", "leave", "Leave > Annual leave"),
               *[_passage(f"t:other:v1:{i:04}", "other", "Other") for i in range(1, 20)],
               _passage("t:leave:v1:0007", "leave", "Leave > Sick leave")]  # the document, not the section
    scores = rag.retrieval_scores(ranking, item)
    assert scores == {"recall_at_8": 1.0, "recall_at_50": 1.0, "precision_at_8": 0.25, "mrr": 0.5}
    assert rag.retrieval_scores(ranking[3:], item) == {"recall_at_8": 0.0, "recall_at_50": 0.0,
                                                       "precision_at_8": 0.0, "mrr": 0.0}


def test_retrieval_scores_use_named_chunks_when_an_item_has_them():
    item = rag.RagItem("x", "c", "t", "u", (), "q", "answer", expected_documents=("leave",),
                       expected_heading="Annual leave", expected_chunks=("t:leave:v1:0004", "t:leave:v1:0009"))
    ranking = [_passage("t:leave:v1:0003", "leave", "Leave > Annual leave"),  # the section, not a named chunk
               *[_passage(f"t:other:v1:{i:04}", "other", "Other") for i in range(8)],
               _passage("t:leave:v1:0004", "leave", "Leave > Annual leave")]  # rank 10
    assert rag.retrieval_scores(ranking, item) == {"recall_at_8": 0.0, "recall_at_50": 0.5,
                                                   "precision_at_8": 0.0, "mrr": 0.1}


def test_final_ranking_is_the_reranked_top_then_the_rest_of_the_candidates():
    from types import SimpleNamespace

    a, b, c, d = (_passage(name, "doc", "") for name in "abcd")
    trace = SimpleNamespace(candidates=[a, b, c, d], reranked=[c, a])
    assert [p.chunk_id for p in rag.final_ranking(trace)] == ["c", "a", "b", "d"]


def test_summary_reports_mean_retrieval_over_scored_answerable_items():
    answer = {"expect": "answer", "expected_documents": ("d1",)}
    hit = {"recall_at_8": 1.0, "recall_at_50": 1.0, "precision_at_8": 0.25, "mrr": 0.5}
    miss = {"recall_at_8": 0.0, "recall_at_50": 1.0, "precision_at_8": 0.0, "mrr": 0.1}
    results = [_result(answer, retrieval=hit), _result(answer, retrieval=miss), _result(answer),
               _result({"expect": "refuse"})]
    report = rag.summarise(results)
    assert {key: report[key] for key in (*rag.RETRIEVAL, "retrieval_items")} == {
        "recall_at_8": 0.5, "recall_at_50": 1.0, "precision_at_8": 0.125, "mrr": 0.3, "retrieval_items": 2}
    assert "recall_at_8" in rag.format_table(report)
    assert rag.retrieval_floor_failures(report) == ["recall_at_8 0.5 < 0.97", "precision_at_8 0.125 < 0.29",
                                                     "mrr 0.3 < 0.93"]


# ------------------------------------------------------------------- the real run (slow, CI gate)
@pytest.fixture(scope="module")
def rag_report(rag_runtime):
    report = rag.run(rag_runtime, rag.DEFAULT_SET, rag.SHARED_DATA, rag.DEFAULT_OVERLAY)
    print(rag.format_table(report))
    return report


@pytest.fixture(scope="module")
def paraphrase_report(rag_runtime):
    """The test split of the paraphrase set, evaluated stage by stage."""
    report = rag.run(rag_runtime, rag.PARAPHRASE_SET, rag.SHARED_DATA, rag.DEFAULT_OVERLAY, split="test",
                     by_stage=True)
    print(rag.format_stage_table(report["stages"]))
    print({key: report[key] for key in (*rag.RETRIEVAL, "retrieval_items")})
    return report


@pytest.mark.slow
@pytest.mark.model
def test_paraphrase_test_split_holds_its_floors(paraphrase_report):
    """The three outcomes on the test split with the trained reader: unanswerables not
    asserted, answers asserted with the expected section cited, the expected fact in asserted answers,
    and the expected section offered at all. The issue's targets (0.85 / 0.5 / 0.7 / 0.85) are not met on
    CPU (docs/benchmarks.md): these floors are the measured level, so a change that loses paraphrased
    answers, asserts near-topic questions or stops offering the closest evidence fails."""
    failures = rag.paraphrase_floor_failures(paraphrase_report)
    assert not failures, (failures, paraphrase_report["stages"])


@pytest.mark.slow
@pytest.mark.model
def test_paraphrase_test_split_retrieval_holds_its_floors(paraphrase_report):
    """Retrieval judged by the labels on questions in users' own words: where the answer
    stage loses most of these items, this says how many retrieval had already lost."""
    figures = {key: paraphrase_report[key] for key in (*rag.RETRIEVAL, "retrieval_items")}
    assert not rag.retrieval_floor_failures(paraphrase_report, rag.PARAPHRASE_RETRIEVAL_FLOORS), figures


@pytest.mark.slow
@pytest.mark.model
def test_rag_regression_meets_thresholds(rag_report):
    headline = {key: rag_report[key] for key in rag.HEADLINE}
    assert not rag.threshold_failures(rag_report), (headline, rag_report["failures"])


@pytest.mark.slow
@pytest.mark.model
def test_rag_regression_retrieval_holds_its_floors(rag_report):
    """What retrieval finds, judged by the labels alone: the expected section in the top 8
    and the 50 candidates, how much of the top 8 it fills, and how high it ranks."""
    figures = {key: rag_report[key] for key in (*rag.RETRIEVAL, "retrieval_items")}
    assert not rag.retrieval_floor_failures(rag_report), figures


@pytest.mark.slow
@pytest.mark.model
def test_rag_regression_never_leaks_or_cites_superseded_versions(rag_report):
    assert rag_report["leaks"] == 0
    assert rag_report["forbidden_citations"] == 0
    assert rag_report["errors"] == 0


# ------------------------------------------------------------- the CLI on a tiny fake data set
TINY_CORPORA = {
    "18f-handbook/leave.md": "# Leave\n\n## Annual leave\n\nNew staff accrue 4 hours of annual leave per pay period.\n",
    "civicactions-handbook/expenses.md": "# Expenses\n\n## Approval\n\nThe kayak budget owner approves kayak expenses.\n",
    "sourcegraph-handbook/pto.md": "# PTO\n\n## Minimum\n\nTeammates take a minimum of 30 days of paid time off.\n",
    "github-site-policy/tos.md": "# Terms\n\n## Age\n\nYou must be age 13 or older to create an account.\n",
}
TINY_OVERLAY = {
    "18f/leave-2027.md": "---\nid: leave-2027\nversion: 2\nsupersedes: leave\n---\n# Leave (2027)\n\n"
                         "## Annual leave\n\nNew staff accrue 6 hours of annual leave per pay period.\n",
    "18f/lantern.md": "---\nid: lantern\ngroups: [hr]\n---\n# Lantern\n\n## Window\n\n"
                      "The lantern retirement window opens on March 3.\n",
}
TINY_ITEMS = [
    {"id": "p1", "category": "plain_answer", "tenant": "civicactions", "question": "Who approves kayak expenses?",
     "expect": "answer", "expected_documents": ["expenses"], "expected_heading": "Approval"},
    {"id": "s1", "category": "superseded", "tenant": "18f", "question": "How many hours of annual leave do new staff accrue?",
     "expect": "answer", "expected_documents": ["leave-2027"], "must_not_cite_documents": ["leave"]},
    {"id": "a1", "category": "acl_restricted", "tenant": "18f", "groups": ["hr"],
     "question": "When does the lantern retirement window open?", "expect": "answer", "expected_documents": ["lantern"]},
    {"id": "a2", "category": "acl_restricted", "tenant": "18f", "groups": [],
     "question": "When does the lantern retirement window open?", "expect": "refuse", "must_not_cite_documents": ["lantern"]},
    {"id": "x1", "category": "cross_tenant", "tenant": "github", "question": "Who approves kayak expenses?", "expect": "refuse"},
]


def test_eval_rag_cli_on_a_tiny_set(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from citadel.cli.main import app

    for relative, text in TINY_CORPORA.items():
        path = tmp_path / "data" / "corpora" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for relative, text in TINY_OVERLAY.items():
        path = tmp_path / "overlay" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "set.jsonl").write_text("\n".join(json.dumps(i) for i in TINY_ITEMS) + "\n")
    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CITADEL_EMBEDDING__BACKEND", "hash")
    # The hash embedder's cosines are bag-of-words overlaps: let the gate's coverage rule decide.
    monkeypatch.setenv("CITADEL_ANSWER__MIN_VECTOR_SCORE", "0.0")
    monkeypatch.setenv("CITADEL_ANSWER__STRONG_VECTOR_SCORE", "0.9")
    args = ["eval", "rag", "--set", str(tmp_path / "set.jsonl"), "--data", str(tmp_path / "data"),
            "--overlay", str(tmp_path / "overlay"), "--json", "--strict"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert set(rag.HEADLINE) <= set(report)
    assert set(rag.RETRIEVAL) <= set(report) and report["retrieval_items"] == 3  # the answerable items
    assert report["recall_at_50"] == 1.0, report  # three documents a tenant: every one is a candidate
    assert report["items"] == 5 and report["leaks"] == 0 and report["forbidden_citations"] == 0
    assert report["citation_accuracy"] == 1.0, report["failures"]
    assert report["refusal_recall"] == 1.0 and report["refusal_precision"] == 1.0
    assert report["build"]["skipped"] is False
    again = json.loads(CliRunner().invoke(app, args, catch_exceptions=False).stdout)
    assert again["build"]["skipped"] is True  # once per home
    assert again["citation_accuracy"] == 1.0
