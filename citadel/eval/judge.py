"""Judging the judge (DESIGN.md §11): the claim verifier's judge against two people.

Reads the claim set (tests/regression/judge/claims.jsonl: id, tenant, question, claim, source_title,
source_heading, source_text) and the annotators' labels (labels.jsonl: id, annotator_a, annotator_b,
each "supported" or "not_supported"). The judge is the reader: P(supported) for a (claim, source)
pair is the highest of its scores for the claim against each of the source's sentences and against
the whole source text. A threshold on that probability is chosen on the dev half (even ids) to
maximise Cohen's kappa against the annotators' consensus (the items where they agree) and reported
on both halves. A judge is trusted at kappa >= 0.7 against people (DESIGN.md §11).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from citadel import regex
from citadel.answer.validator import has_unsupported_figure, strip_markers

REPO = Path(__file__).resolve().parents[2]
JUDGE_DIR = REPO / "tests" / "regression" / "judge"
DEFAULT_CLAIMS = JUDGE_DIR / "claims.jsonl"
DEFAULT_LABELS = JUDGE_DIR / "labels.jsonl"
DEFAULT_ORIGINS = JUDGE_DIR / "origins.jsonl"  # how each item was made; never shown to annotators
SUPPORTED = "supported"
NOT_SUPPORTED = "not_supported"
LABELS = (SUPPORTED, NOT_SUPPORTED)
TRUSTED_KAPPA = 0.7
DEFAULT_THRESHOLD = 0.5
MAX_SENTENCES = 200  # of one source, scored in one reader call (the reader takes at most 512 texts)
_SENTENCE_BREAK = regex.compile("eval.judge.sentence_break", r"[.!?](?P<cut>\s+)|(?P<lines>\n+)")
_DIGITS = regex.compile("eval.judge.digits", r"\d+")

Scorer = Callable[[str, Sequence[str]], list[float]]


class LabelsMissing(FileNotFoundError):
    """The annotators' labels file does not exist yet."""


@dataclass(frozen=True)
class JudgedClaim:
    id: str
    annotator_a: str
    annotator_b: str
    probability: float

    @property
    def consensus(self) -> str | None:
        return self.annotator_a if self.annotator_a == self.annotator_b else None


# ------------------------------------------------------------------------------ reading
def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_claims(path: Path | str = DEFAULT_CLAIMS) -> dict[str, dict[str, Any]]:
    return {str(row["id"]): row for row in read_jsonl(Path(path))}


def load_labels(path: Path | str = DEFAULT_LABELS) -> dict[str, tuple[str, str]]:
    """id -> (annotator A's label, annotator B's label). Raises LabelsMissing when the file is absent
    and ValueError on a label other than supported / not_supported."""
    path = Path(path)
    if not path.exists():
        raise LabelsMissing(f"no labels at {path}: two annotators label the claims in "
                            f"{path.parent / 'claims.jsonl'} first (see {path.parent / 'README.md'}); "
                            f"each line: {{\"id\", \"annotator_a\", \"annotator_b\"}} with values {LABELS}")
    labels = {}
    for row in read_jsonl(path):
        pair = (str(row["annotator_a"]).strip(), str(row["annotator_b"]).strip())
        bad = [label for label in pair if label not in LABELS]
        if bad:
            raise ValueError(f"{path}: item {row['id']}: label {bad[0]!r} is not one of {LABELS}")
        labels[str(row["id"])] = pair
    return labels


# ------------------------------------------------------------------------------ the judge
def source_sentences(text: str) -> list[str]:
    pieces = (p.strip() for p in _SENTENCE_BREAK.split_at(text, "cut", "lines"))
    return [p for p in pieces if p][:MAX_SENTENCES]


def support_probability(score: Scorer, claim: str, source_text: str, figures: bool = False) -> float:
    """The judge's P(the source states the claim): the best of the claim against each sentence of the
    source and against the whole source. With `figures`, as answers meet the judge: the validator
    has already dropped a claim stating a figure its source does not hold (0 whatever the reader says)."""
    if figures and has_unsupported_figure(strip_markers(claim), source_text.lower()):
        return 0.0
    texts = source_sentences(source_text) + [source_text]
    return max(score(claim, texts), default=0.0)


def judged(claims: dict[str, dict[str, Any]], labels: dict[str, tuple[str, str]], score: Scorer,
           figures: bool = False) -> list[JudgedClaim]:
    """Every labeled claim with the judge's probability (claims without labels are skipped)."""
    rows = []
    for claim_id in sorted(set(claims) & set(labels)):
        claim = claims[claim_id]
        a, b = labels[claim_id]
        rows.append(JudgedClaim(claim_id, a, b, support_probability(score, claim["claim"], claim["source_text"],
                                                                   figures)))
    return rows


def verdict(probability: float, threshold: float) -> str:
    return SUPPORTED if probability >= threshold else NOT_SUPPORTED


# ------------------------------------------------------------------------------ agreement
def cohen_kappa(first: Sequence[str], second: Sequence[str]) -> float | None:
    """Cohen's kappa of two raters over the same items; None when it is undefined: no items, or chance
    agreement of 1 (both raters gave one and the same label throughout)."""
    if len(first) != len(second):
        raise ValueError("both raters must rate the same items")
    n = len(first)
    if not n:
        return None
    observed = sum(x == y for x, y in zip(first, second)) / n
    categories = set(first) | set(second)
    expected = sum((list(first).count(c) / n) * (list(second).count(c) / n) for c in categories)
    if expected == 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def agreement(first: Sequence[str], second: Sequence[str]) -> float | None:
    return sum(x == y for x, y in zip(first, second)) / len(first) if first else None


def confusion(truth: Sequence[str], predicted: Sequence[str]) -> dict[str, int]:
    """Counts with "supported" as the positive class: tp (both supported), fp (judge supported, people
    not), fn (judge not, people supported), tn."""
    table = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for true, guess in zip(truth, predicted):
        key = ("t" if true == guess else "f") + ("p" if guess == SUPPORTED else "n")
        table[key] += 1
    return table


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def half_report(rows: Sequence[JudgedClaim], threshold: float) -> dict[str, Any]:
    """The judge against A, against B and against their consensus, and A against B, on `rows`."""
    judge = [verdict(r.probability, threshold) for r in rows]
    a = [r.annotator_a for r in rows]
    b = [r.annotator_b for r in rows]
    agreed = [(r.consensus, j) for r, j in zip(rows, judge) if r.consensus is not None]
    consensus = [c for c, _ in agreed]
    judge_on_consensus = [j for _, j in agreed]
    return {"items": len(rows), "consensus_items": len(agreed),
            "agreement_with_consensus": _rounded(agreement(consensus, judge_on_consensus)),
            "kappa_judge_a": _rounded(cohen_kappa(a, judge)), "kappa_judge_b": _rounded(cohen_kappa(b, judge)),
            "kappa_judge_consensus": _rounded(cohen_kappa(consensus, judge_on_consensus)),
            "kappa_a_b": _rounded(cohen_kappa(a, b)), "agreement_a_b": _rounded(agreement(a, b)),
            "confusion_vs_consensus": confusion(consensus, judge_on_consensus),
            "supported_share_consensus": _rounded(consensus.count(SUPPORTED) / len(consensus) if consensus else None)}


def is_dev(claim_id: str) -> bool:
    """The dev half: ids whose number is even (ids without a number go to the test half)."""
    digits = _DIGITS.findall(claim_id)
    return bool(digits) and int(digits[-1]) % 2 == 0


def choose_threshold(rows: Sequence[JudgedClaim]) -> float:
    """The probability cut maximising kappa against the consensus on `rows` (ties: the cut nearest 0.5);
    DEFAULT_THRESHOLD when no item has a consensus."""
    agreed = [r for r in rows if r.consensus is not None]
    if not agreed:
        return DEFAULT_THRESHOLD
    probabilities = sorted({r.probability for r in agreed})
    cuts = [DEFAULT_THRESHOLD] + probabilities + [(x + y) / 2 for x, y in zip(probabilities, probabilities[1:])]
    consensus = [r.consensus for r in agreed]

    def quality(cut: float) -> tuple[float, float]:
        kappa = cohen_kappa(consensus, [verdict(r.probability, cut) for r in agreed])
        return (kappa if kappa is not None else -1.0, -abs(cut - DEFAULT_THRESHOLD))

    return max(cuts, key=quality)


def report(rows: Sequence[JudgedClaim], judge_id: str, threshold: float | None = None,
           claims_total: int | None = None) -> dict[str, Any]:
    """The whole report: the threshold (chosen on dev unless given) and the figures on dev, test, all."""
    dev = [r for r in rows if is_dev(r.id)]
    test = [r for r in rows if not is_dev(r.id)]
    chosen = choose_threshold(dev) if threshold is None else threshold
    halves = {"dev": half_report(dev, chosen), "test": half_report(test, chosen), "all": half_report(rows, chosen)}
    return {"judge": judge_id, "claims": claims_total if claims_total is not None else len(rows),
            "labeled": len(rows), "threshold": round(chosen, 4),
            "threshold_from": "given" if threshold is not None else "dev (even ids): max kappa vs consensus",
            "trusted_at_kappa": TRUSTED_KAPPA,
            "trusted": (halves["test"]["kappa_judge_consensus"] or 0.0) >= TRUSTED_KAPPA,
            **halves}


def run(score: Scorer, judge_id: str, claims_path: Path | str = DEFAULT_CLAIMS,
        labels_path: Path | str = DEFAULT_LABELS, threshold: float | None = None,
        origins_path: Path | str | None = None, figures: bool = False) -> dict[str, Any]:
    """The report; with `origins_path` (how each item was made), the judge's and the people's
    supported share per origin as well; `figures`: the validator's figure check before the judge."""
    claims = load_claims(claims_path)
    labels = load_labels(labels_path)
    unknown = sorted(set(labels) - set(claims))
    if unknown:
        raise ValueError(f"labels for ids not in the claim set: {', '.join(unknown[:5])}")
    rows = judged(claims, labels, score, figures)
    result = report(rows, f"{judge_id}+figures" if figures else judge_id, threshold, len(claims))
    if origins_path is not None and Path(origins_path).exists():
        origins = {str(r["id"]): str(r["origin"]) for r in read_jsonl(Path(origins_path))}
        result["by_origin"] = by_origin(rows, origins, result["threshold"])
    return result


def by_origin(rows: Sequence[JudgedClaim], origins: dict[str, str], threshold: float) -> dict[str, dict[str, Any]]:
    """Per origin (real, perturbed_figure, ...): items, the share the judge calls supported, and the
    share of consensus items the people call supported."""
    table: dict[str, dict[str, Any]] = {}
    for origin in sorted(set(origins.get(r.id, "unknown") for r in rows)):
        members = [r for r in rows if origins.get(r.id, "unknown") == origin]
        agreed = [r.consensus for r in members if r.consensus is not None]
        table[origin] = {"items": len(members),
                         "judge_supported": _rounded(sum(verdict(r.probability, threshold) == SUPPORTED
                                                         for r in members) / len(members)),
                         "consensus_supported": _rounded(agreed.count(SUPPORTED) / len(agreed) if agreed else None)}
    return table


# ------------------------------------------------------------------------------ printing
ROWS = (("items", "items"), ("consensus items", "consensus_items"),
        ("agreement with consensus", "agreement_with_consensus"), ("kappa judge vs A", "kappa_judge_a"),
        ("kappa judge vs B", "kappa_judge_b"), ("kappa judge vs consensus", "kappa_judge_consensus"),
        ("kappa A vs B", "kappa_a_b"), ("agreement A vs B", "agreement_a_b"))


def format_report(result: dict[str, Any]) -> str:
    lines = [f"judge {result['judge']}: {result['labeled']} of {result['claims']} claims labeled; "
             f"threshold {result['threshold']} ({result['threshold_from']})",
             f"{'':28}{'dev':>8}{'test':>8}{'all':>8}"]
    for name, key in ROWS:
        cells = "".join(f"{_cell(result[half][key]):>8}" for half in ("dev", "test", "all"))
        lines.append(f"{name:28}{cells}")
    lines.append("")
    lines.append("confusion vs consensus (rows: people, columns: judge)")
    lines.append(f"  {'':6}{'':16}{'supported':>11}{'not_supported':>15}")
    for half in ("dev", "test", "all"):
        c = result[half]["confusion_vs_consensus"]
        lines.append(f"  {half:6}{'supported':16}{c['tp']:>11}{c['fn']:>15}")
        lines.append(f"  {'':6}{'not_supported':16}{c['fp']:>11}{c['tn']:>15}")
    for origin, row in (result.get("by_origin") or {}).items():
        lines.append(f"origin {origin:18} items {row['items']:>4}  judge supported {_cell(row['judge_supported'])}  "
                     f"consensus supported {_cell(row['consensus_supported'])}")
    verdict_line = "trusted" if result["trusted"] else "NOT trusted"
    lines.append(f"{verdict_line}: test kappa vs consensus {_cell(result['test']['kappa_judge_consensus'])} "
                 f"(trusted at >= {result['trusted_at_kappa']})")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)
