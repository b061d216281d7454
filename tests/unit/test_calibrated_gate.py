"""The calibrated gate, clarifying questions, semantic support and `eval rag --by-stage`."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from citadel.answer.clarify import GENERIC, candidate_sections, clarifying_question
from citadel.answer.gate import (CLARIFY, NEEDS_CLARIFICATION, GateSignals, compute_term_idf, gate_signals,
                                 soft_coverage)
from citadel.answer.gate_model import (PACKAGED_MODEL, CalibratedGate, GateExample, GateModel, fit_gate_model)
from citadel.answer.semantic import ClaimSupport, match_strength, question_words, term_matches
from citadel.answer.service import QueryVectorMemo
from citadel.answer.validator import AnswerValidator
from citadel.eval import rag
from citadel.prompting.source import Source
from citadel.text import stem
from citadel.types import Passage

MODEL = "test-embedder"


def passage(text: str, heading: str = "Leave > Annual leave", document_id: str = "leave", vector_rank=None,
            keyword_rank=None) -> Passage:
    return Passage(f"t:{document_id}:v1:0000", text, document_id, "Leave", 1, heading, None, f"{document_id}.md",
                   0.0, vector_rank=vector_rank, keyword_rank=keyword_rank)


IDF = compute_term_idf(["annual leave accrues four hours per pay period", "travel needs approval",
                        "laptops are issued by IT", "leave is approved by a supervisor"])


# ------------------------------------------------------------------------------------- signals
def test_signals_read_coverage_ranks_agreement_and_unseen_terms():
    top = [passage("Annual leave accrues four hours per pay period.", vector_rank=1, keyword_rank=2)]
    signals, covered = gate_signals({"annual", "leav", "kayak"}, top, IDF, [0.7])
    assert 0 < signals.lexical < 1 and "kayak" not in covered
    assert signals.vector == 0.7 and signals.vector_rank == 1.0 and signals.keyword_rank == 0.5
    assert signals.agree == 1.0 and signals.unseen > 0  # "kayak" is in no document
    far = [passage("Annual leave accrues.", vector_rank=30, keyword_rank=None)]
    assert gate_signals({"annual"}, far, IDF, [0.2])[0].agree == 0.0
    assert len(signals.features()) == len(GateSignals.FEATURES)


def test_soft_coverage_counts_a_matched_synonym_partly():
    terms = {"vacat", "hour"}
    assert soft_coverage(terms, {"hour"}, IDF, {}) < soft_coverage(terms, {"hour"}, IDF, {"vacat": 0.8}) < 1.0
    assert soft_coverage(terms, {"hour", "vacat"}, IDF, {}) == 1.0


# ------------------------------------------------------------------------------------- the model
def _model(answer_at=0.7, clarify_at=0.4, coef=(3.0, 0, 0, 0, 0, 0, 0, 0)) -> GateModel:
    return GateModel("gate-test", MODEL, GateSignals.FEATURES, (0.5,) * 8, (0.25,) * 8, coef, 0.0, answer_at, clarify_at)


def test_three_outcomes_from_the_probability():
    gate = CalibratedGate(_model())
    question = "How many hours of annual leave accrue per pay period?"
    strong = gate.check(question, [passage("Annual leave accrues four hours per pay period.")], IDF, [0.6],
                        embedding_model=MODEL)
    assert strong.outcome == "answer" and strong.probability >= 0.7 and strong.model == "gate-test"
    weak = gate.check("How many hours of annual kayak rental accrue?", [passage("Annual leave accrues hours.")], IDF,
                      [0.6], embedding_model=MODEL)
    none = gate.check("Can I bring a kayak to the retreat?", [passage("Laptops are issued by IT.")], IDF, [0.1],
                      embedding_model=MODEL)
    assert none.outcome == "refuse" and none.reason == "low_coverage"
    assert weak.probability > none.probability
    assert {weak.outcome} <= {"clarify", "refuse"}


def test_short_questions_get_a_clarifying_question_never_an_answer():
    gate = CalibratedGate(_model(answer_at=0.0, clarify_at=0.0))
    for question in ("", "leave", "leave?"):
        decision = gate.check(question, [passage("Annual leave accrues.")], IDF, [0.9], embedding_model=MODEL)
        assert decision.outcome == CLARIFY and decision.reason == NEEDS_CLARIFICATION


def test_another_embedder_falls_back_to_the_hand_set_gate():
    gate = CalibratedGate(_model(answer_at=1.0, clarify_at=1.0))  # would refuse everything
    decision = gate.check("How many hours of annual leave accrue per pay period?",
                          [passage("Annual leave accrues four hours per pay period.")], IDF, [0.6],
                          embedding_model="another-model")
    assert decision.passed and decision.model == "thresholds"


def test_fit_separates_the_classes_and_orders_its_operating_points():
    rng = np.random.default_rng(0)
    examples = []
    for _ in range(60):
        examples.append(GateExample(tuple(rng.uniform(0.5, 1.0, 8)), True, True))
        examples.append(GateExample(tuple(rng.uniform(0.0, 0.55, 8)), False, False))
    model = fit_gate_model(examples, MODEL, "gate-x", {"set": "synthetic"})
    assert 0.0 <= model.clarify_at <= model.answer_at <= 1.0
    assert model.fitted["unanswerable_refused_or_clarified"] >= 0.95
    assert model.fitted["answered_when_evidence_present"] >= 0.8
    again = GateModel.from_dict(json.loads(model.to_json()))
    assert again == model


def test_a_model_file_with_other_features_is_refused(tmp_path):
    data = json.loads(_model().to_json())
    data["features"] = ["lexical"]
    with pytest.raises(ValueError, match="features"):
        GateModel.from_dict(data)
    data = json.loads(_model().to_json())
    data["answer_at"], data["clarify_at"] = 0.2, 0.5
    with pytest.raises(ValueError, match="clarify_at"):
        GateModel.from_dict(data)


def test_the_packaged_model_loads_and_names_what_it_was_fitted_on():
    model = GateModel.load(PACKAGED_MODEL)
    assert model.features == GateSignals.FEATURES and model.version.startswith("gate-")
    assert model.embedding_model == "sentence-transformers/all-MiniLM-L6-v2"


# ------------------------------------------------------------------------------------- clarify
def test_clarifying_question_names_candidate_sections_and_offers_a_person():
    passages = [passage("a", "Leave > Annual leave"), passage("b", "Leave > Annual leave"), passage("c", "Leave > Sick leave")]
    assert candidate_sections(passages) == ["Annual leave (Leave)", "Sick leave (Leave)"]
    text = clarifying_question(passages)
    assert '"Annual leave (Leave)"' in text and "person" in text
    assert clarifying_question([]) == GENERIC


# ------------------------------------------------------------------------------------- semantic
class _Embedder:
    """Unit vectors by a fixed table; unknown texts get an orthogonal axis."""

    def __init__(self, table: dict[str, np.ndarray]):
        self.table, self.calls = table, []

    def embed_queries(self, texts):
        self.calls.append(list(texts))
        return np.stack([self.table.get(t, np.array([0.0, 0.0, 1.0], dtype=np.float32)) for t in texts])


def test_term_matches_map_word_cosines_and_remember_words():
    embedder = _Embedder({"vacation": np.array([0.6, 0.8, 0.0], dtype=np.float32)})
    words = QueryVectorMemo(embedder)
    passages = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=np.float32)
    matches = term_matches("How much vacation?", passages, words)
    term = stem("vacation")
    assert question_words("How much vacation?") == {term: "vacation"}
    assert matches[0][term] == match_strength(0.6) == 1.0 and matches[1][term] == match_strength(0.8) == 1.0
    term_matches("How much vacation?", passages, words)
    assert embedder.calls == [["vacation"]]  # remembered
    assert match_strength(0.0) == 0.0


def test_validator_accepts_a_paraphrase_by_meaning_but_still_drops_invented_figures():
    claim = "Employees earn time off every two weeks."
    invented = "Employees earn 9 days off every two weeks."
    embedder = _Embedder({claim: np.array([1.0, 0.0, 0.0], dtype=np.float32),
                          invented: np.array([1.0, 0.0, 0.0], dtype=np.float32)})
    source = Source(1, passage("Annual leave accrues four hours per pay period."),
                    "Annual leave accrues four hours per pay period.", 10)
    support = ClaimSupport(QueryVectorMemo(embedder), lambda: {1: np.array([1.0, 0.0, 0.0], dtype=np.float32)})
    validator = AnswerValidator()
    assert validator.validate("q", f"{claim} [1]", [source]).fallback  # lexically unsupported
    kept = validator.validate("q", f"{claim} [1]", [source], support)
    assert not kept.fallback and claim.rstrip(".") in kept.text and kept.used == [1]
    dropped = validator.validate("q", f"{invented} [1]", [source], support)
    assert dropped.fallback and dropped.removed["figures"] == 1


# ------------------------------------------------------------------------------------- by stage
def _item(**kwargs) -> rag.RagItem:
    base = {"id": "x", "category": "synonym", "tenant": "t", "user": "u", "groups": (), "question": "q",
            "expect": "answer", "expected_documents": ("leave",), "expected_heading": "Annual leave"}
    return rag.RagItem(**{**base, **kwargs})


def test_lost_at_names_the_first_stage_without_the_section(monkeypatch):
    item = _item()
    right, wrong = passage("x"), passage("y", "Travel > Approval", "travel")
    decision = SimpleNamespace(passed=True)
    monkeypatch.setattr(rag, "_legs_hold_evidence", lambda *a: True)

    def lost(reply="answered", **trace):
        fields = {"routed": False, "search_query": "q", "candidates": [right], "reranked": [right],
                  "sources": [right], "drafted": [right], **trace}
        response = SimpleNamespace(trace=SimpleNamespace(**fields), gate=decision)
        return rag.lost_at(None, None, item, response, SimpleNamespace(cited_correctly=True, reply=reply))

    assert lost() == "answered"
    assert lost(routed=True) == "route"
    assert lost(candidates=[wrong] * 8 + [right]) == "fusion"
    assert lost(reranked=[wrong]) == "rerank"
    assert lost(drafted=[wrong]) == "generation"
    assert lost(sources=[wrong]) == "expansion"
    assert lost(reply="not_confirmed") == "confirm"  # the topic found, the asked fact not
    assert lost(reply="refused") == "gate"
    monkeypatch.setattr(rag, "_legs_hold_evidence", lambda *a: False)
    assert lost() == "retrieval"


def test_stage_table_counts_per_stage_category_and_unanswerable_outcome():
    def result(stage, category="synonym", expect="answer", outcome="answer"):
        r = rag.ItemResult(_item(category=category, expect=expect), outcome != "answer", None, [], [])
        r.stage, r.outcome = stage, outcome
        return r

    table = rag.stage_table([result("answered"), result("gate", outcome="clarify"), result("retrieval", "acronym"),
                             result(None, "near_topic", "refuse", "clarify"), result(None, "near_topic", "refuse", "answer")])
    assert table["lost_at"]["answered"] == 1 and table["lost_at"]["gate"] == 1 and table["lost_at"]["retrieval"] == 1
    assert table["lost_at_gate"] == {"clarify": 1, "refuse": 0}
    assert table["categories"]["acronym"]["retrieval"] == 1
    assert table["unanswerable"]["near_topic"] == {"answer": 1, "clarify": 1, "refuse": 0}
    assert "retrieval" in rag.format_stage_table(table)


# ------------------------------------------------------------------------------------- the set
def test_the_paraphrase_set_is_large_split_and_a_quarter_unanswerable():
    items = rag.load_set(rag.PARAPHRASE_SET)
    assert len(items) >= 200
    for tenant in rag.TENANT_CORPORA:
        assert sum(i.tenant == tenant for i in items) >= 40, tenant
    assert sum(not i.answerable for i in items) / len(items) >= 0.25
    assert {i.split for i in items} == {"dev", "test"}
    assert all(i.expected_heading and i.expected_answer for i in items if i.answerable)
    test = rag.load_set(rag.PARAPHRASE_SET, "test")
    assert 0.4 <= len(test) / len(items) <= 0.6


def test_the_paraphrase_labels_match_the_handbooks():
    if not (rag.SHARED_DATA / "corpora").is_dir():
        pytest.skip(f"shared handbook data not found at {rag.SHARED_DATA / 'corpora'} (see ../shared/data/SOURCES.md)")
    items = rag.load_set(rag.PARAPHRASE_SET)
    assert rag.label_problems(items, rag.corpus_sections()) == []


def test_paraphrase_scores_and_floors():
    report = {"leaks": 0, "errors": 0, "unanswerable_not_asserted": 0.9, "asserted_with_section_cited": 0.6,
              "fact_in_asserted": 0.8, "section_offered": 0.9}
    assert rag.paraphrase_scores(report) == {k: report[k] for k in rag.HONEST_MIDDLE}
    assert rag.paraphrase_floor_failures(report) == []
    report["unanswerable_not_asserted"] = 0.5
    report["leaks"] = 1
    assert len(rag.paraphrase_floor_failures(report)) == 2
