"""The calibrated confidence gate: answer, clarify or refuse from several signals at once.

Hand thresholds on lexical coverage refused paraphrased questions whose answer sat at rank 1: "how
much vacation do I get?" shares no word with "Annual leave". The calibrated gate reads all of the
gate's signals (`GateSignals`: lexical and semantic coverage, the question's cosine to the passages,
their ranks in both legs, whether the legs agree, the share of terms the tenant never uses) through a
logistic model fitted on the dev split of the paraphrase set (`citadel train gate`), and compares the
probability that the passages answer the question with two operating points chosen there:
- at or above `answer_at`: answer;
- at or above `clarify_at`: the evidence is weak but present — ask a short clarifying question that
  names the candidate sections (reason `needs_clarification`), never an answer from it;
- below: refuse (`low_coverage`).
The parameters are a versioned JSON file (the packaged default beside this module, or
`answer.gate_model`). They were fitted with one embedder's cosines: where the passages were
embedded by another model (or only the keyword leg ran) the hand-set gate decides instead.
Scoring is a dot product: no scikit-learn on the request path.

It is not the default (`answer.gate: calibrated` turns it on): fitted on the paraphrase set's dev
split its signals barely told answerable questions from near-topic ones, and it cost the regression
set most of its answers (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Sequence

from citadel.answer.gate import (LOW_COVERAGE, NEEDS_CLARIFICATION, NO_ELIGIBLE_SOURCE, ConfidenceGate, GateDecision,
                                 GateSignals, GateThresholds, TermIdf, assess)
from citadel.answer.glossary import EMPTY_GLOSSARY, Glossary
from citadel.types import Passage

PACKAGED_MODEL = Path(__file__).with_name("gate_model.json")
MODEL_FORMAT = 1


@dataclass(frozen=True)
class GateModel:
    """Standardised logistic regression over `GateSignals.features()` plus two operating points."""

    version: str
    embedding_model: str  # the embedder whose cosines it was fitted on
    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    answer_at: float
    clarify_at: float
    fitted: dict = field(default_factory=dict)  # what it was fitted on and how it scored there

    def probability(self, signals: GateSignals) -> float:
        return self.probability_of(signals.features())

    def probability_of(self, features: Sequence[float]) -> float:
        z = self.intercept + sum(c * (x - m) / s for c, x, m, s in zip(self.coef, features, self.mean, self.scale))
        return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))

    def to_json(self) -> str:
        return json.dumps({"format": MODEL_FORMAT, **asdict(self)}, indent=1) + "\n"

    @classmethod
    def from_dict(cls, data: dict) -> "GateModel":
        if data.get("format") != MODEL_FORMAT:
            raise ValueError(f"gate model format {data.get('format')!r} is not {MODEL_FORMAT}")
        if tuple(data["features"]) != GateSignals.FEATURES:
            raise ValueError(f"gate model features {data['features']} do not match {GateSignals.FEATURES}")
        if not 0.0 <= data["clarify_at"] <= data["answer_at"] <= 1.0:
            raise ValueError("gate model needs 0 <= clarify_at <= answer_at <= 1")
        return cls(str(data["version"]), str(data["embedding_model"]), tuple(data["features"]),
                   tuple(map(float, data["mean"])), tuple(float(s) or 1.0 for s in data["scale"]),
                   tuple(map(float, data["coef"])), float(data["intercept"]), float(data["answer_at"]),
                   float(data["clarify_at"]), dict(data.get("fitted") or {}))

    @classmethod
    def load(cls, path: Path | str | None = None) -> "GateModel":
        return cls.from_dict(json.loads(Path(path or PACKAGED_MODEL).read_text(encoding="utf-8")))


class CalibratedGate:
    """The gate from a fitted model (`answer.gate: calibrated`); `fallback` (the hand-set one)
    decides where the model does not apply."""

    reads_word_matches = True  # its semantic signal needs the question's words embedded

    def __init__(self, model: GateModel, thresholds: GateThresholds | None = None):
        self.model = model
        self.fallback = ConfidenceGate(thresholds)

    @property
    def thresholds(self) -> GateThresholds:
        return self.fallback.thresholds

    def applies_to(self, embedding_model: str | None) -> bool:
        return embedding_model == self.model.embedding_model

    def check(self, question: str, passages: Sequence[Passage], idf: TermIdf,
              vector_scores: Sequence[float] | None = None, rerank_score: float | None = None,
              term_matches: Sequence[dict[str, float]] | None = None, glossary: Glossary = EMPTY_GLOSSARY,
              embedding_model: str | None = None) -> GateDecision:
        if not passages:
            return GateDecision(False, NO_ELIGIBLE_SOURCE)
        if not vector_scores or not self.applies_to(embedding_model):
            return self.fallback.check(question, passages, idf, vector_scores, rerank_score, term_matches, glossary)
        top = list(passages[: self.thresholds.passages])
        signals, missing, names_a_fact = assess(question, top, idf, vector_scores, term_matches, glossary)
        probability = self.model.probability(signals)
        if not names_a_fact or self.model.clarify_at <= probability < self.model.answer_at:
            reason = NEEDS_CLARIFICATION
        else:
            reason = None if probability >= self.model.answer_at else LOW_COVERAGE
        return GateDecision(reason is None, reason, signals.lexical, signals.vector, rerank_score, missing, signals,
                            probability, self.model.version)


def make_gate(answer_config) -> ConfidenceGate | CalibratedGate:
    """The configured gate: the hand-set `thresholds` gate (default), or `calibrated` with the
    packaged or configured model."""
    thresholds = GateThresholds.from_config(answer_config)
    if answer_config.gate == "thresholds":
        return ConfidenceGate(thresholds)
    return CalibratedGate(GateModel.load(answer_config.gate_model), thresholds)


# ------------------------------------------------------------------------------------ fitting
# Operating points chosen on the dev split: answer only above the probability at which at most this
# share of the unanswerable questions would be answered (refusal recall first, then as many answers
# as that allows: the highest refusal precision it permits) ...
MAX_UNANSWERABLE_ANSWERED = 0.05
# ... and clarify, rather than refuse, down to the probability this share of the answerable questions
# with their evidence present reach: weak but present evidence gets a question back.
CLARIFY_QUANTILE = 0.1


@dataclass(frozen=True)
class GateExample:
    features: tuple[float, ...]  # GateSignals.features()
    answerable: bool  # the set says the documents answer it
    evidence: bool  # ... and the expected section was among the passages the gate judged


def fit_gate_model(examples: Sequence[GateExample], embedding_model: str, version: str,
                   fitted_on: dict | None = None) -> GateModel:
    """A standardised logistic regression (scikit-learn, balanced classes) predicting "answerable with
    its evidence present", and the operating points above."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    x = np.asarray([e.features for e in examples], dtype=np.float64)
    y = np.asarray([e.answerable and e.evidence for e in examples], dtype=np.int64)
    if len(set(y.tolist())) < 2:
        raise ValueError("fitting the gate needs examples of both outcomes")
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    regression = LogisticRegression(class_weight="balanced", C=1.0, max_iter=1000).fit((x - mean) / scale, y)
    model = GateModel(version, embedding_model, GateSignals.FEATURES, tuple(mean.tolist()), tuple(scale.tolist()),
                      tuple(regression.coef_[0].tolist()), float(regression.intercept_[0]), 1.0, 0.0)
    probabilities = [model.probability_of(e.features) for e in examples]
    answer_at = _answer_threshold([p for p, e in zip(probabilities, examples) if not e.answerable])
    present = sorted(p for p, e in zip(probabilities, examples) if e.answerable and e.evidence)
    clarify_at = min(answer_at, present[int(CLARIFY_QUANTILE * (len(present) - 1))] if present else answer_at)
    fitted = {**(fitted_on or {}), **_scores(probabilities, examples, answer_at, clarify_at)}
    return replace(model, answer_at=round(answer_at, 6), clarify_at=round(clarify_at, 6), fitted=fitted)


def _answer_threshold(unanswerable: Sequence[float]) -> float:
    """The lowest probability above which at most MAX_UNANSWERABLE_ANSWERED of these lie."""
    ranked = sorted(unanswerable, reverse=True)
    allowed = int(MAX_UNANSWERABLE_ANSWERED * len(ranked))
    if not ranked:
        return 0.5
    return min(1.0, ranked[allowed] + 1e-6) if allowed < len(ranked) else 0.0


def _scores(probabilities: Sequence[float], examples: Sequence[GateExample], answer_at: float,
            clarify_at: float) -> dict:
    def outcome(p: float) -> str:
        return "answer" if p >= answer_at else "clarify" if p >= clarify_at else "refuse"

    outcomes = [outcome(p) for p in probabilities]
    answerable = [o for o, e in zip(outcomes, examples) if e.answerable]
    with_evidence = [o for o, e in zip(outcomes, examples) if e.answerable and e.evidence]
    unanswerable = [o for o, e in zip(outcomes, examples) if not e.answerable]
    share = lambda items, kinds: round(sum(o in kinds for o in items) / len(items), 4) if items else None  # noqa: E731
    return {"examples": len(examples), "answerable": len(answerable), "unanswerable": len(unanswerable),
            "answered_when_answerable": share(answerable, ("answer",)),
            "answered_when_evidence_present": share(with_evidence, ("answer",)),
            "unanswerable_refused_or_clarified": share(unanswerable, ("clarify", "refuse"))}
