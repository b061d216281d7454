"""The release gate's verdict (DESIGN.md §11): a candidate bundle's figures against the baseline's.

`citadel eval gate` (citadel/eval/gate.py) runs the labeled sets on both bundles; this module only
compares what they measured. A candidate is blocked when any gated figure of any set is worse than the
baseline's by more than that figure's margin, or when it leaks at all. Margins are in the figure's own
units (shares: 0.01 is one point), small on purpose: the runs are deterministic on one code tree, so
a change beyond a margin is the change's, not noise — the seed's example, a prompt change adding 1.4
points of unsupported claims, is blocked even though its answers are longer.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Mapping

HIGHER, LOWER = "higher", "lower"  # which way is better


@dataclass(frozen=True)
class GatedFigure:
    name: str
    better: str  # HIGHER or LOWER
    margin: float


# Per figure: which way is better and how much worse a candidate may be (see the module docstring).
GATED = {f.name: f for f in (
    GatedFigure("citation_accuracy", HIGHER, 0.01),
    GatedFigure("source_recall", HIGHER, 0.01),
    GatedFigure("refusal_precision", HIGHER, 0.01),
    GatedFigure("refusal_recall", HIGHER, 0.01),
    GatedFigure("unsupported_claim_rate", LOWER, 0.01),  # claims of the answers given, by their cited sources
    GatedFigure("draft_unsupported_rate", LOWER, 0.01),  # claims the generator wrote, by the sources it was given
    GatedFigure("both_parts_ok", HIGHER, 0.05),  # the runs' multi-part set
    GatedFigure("kappa_judge_consensus", HIGHER, 0.05),  # the judge set: the bundle's judge against people
)}
ABSOLUTE = {"leaks": 0, "forbidden_citations": 0, "errors": 0}  # any more than this blocks, whatever the baseline

OK, REGRESSED, IMPROVED, NEW = "ok", "regressed", "improved", "not in baseline"


@dataclass(frozen=True)
class Row:
    set: str
    figure: str
    baseline: float | None
    candidate: float | None
    margin: float | None
    verdict: str


@dataclass
class GateReport:
    baseline_bundle: str
    candidate_bundle: str
    rows: list[Row]
    changes: list[dict[str, Any]]  # the bundle diff: what the candidate changed

    @property
    def blocked(self) -> bool:
        return any(r.verdict == REGRESSED for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": "blocked" if self.blocked else "passed", "baseline_bundle": self.baseline_bundle,
                "candidate_bundle": self.candidate_bundle, "changes": self.changes,
                "regressions": [asdict(r) for r in self.rows if r.verdict == REGRESSED],
                "rows": [asdict(r) for r in self.rows]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def to_markdown(self) -> str:
        head = [f"# Release gate: {'BLOCKED' if self.blocked else 'passed'}", "",
                f"Baseline bundle `{self.baseline_bundle}`, candidate bundle `{self.candidate_bundle}`.", ""]
        if self.changes:
            head += ["What the candidate changes:", ""] + [
                f"- `{c['key']}`: {_cell(c['old'])} → {_cell(c['new'])}" for c in self.changes] + [""]
        table = ["| set | figure | baseline | candidate | margin | verdict |", "|---|---|---|---|---|---|"]
        table += [f"| {r.set} | {r.figure} | {_cell(r.baseline)} | {_cell(r.candidate)} | {_cell(r.margin)} | "
                  f"{'**' + r.verdict + '**' if r.verdict == REGRESSED else r.verdict} |" for r in self.rows]
        return "\n".join(head + table) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 80 else text[:79] + "…"


def judge_row(set_name: str, name: str, baseline: float | None, candidate: float | None,
              margins: Mapping[str, float]) -> Row | None:
    """One figure's verdict; None when the figure is not gated or neither side measured it."""
    if name in ABSOLUTE:
        if candidate is None:
            return None
        return Row(set_name, name, baseline, candidate, None,
                   REGRESSED if candidate > ABSOLUTE[name] else OK)
    figure = GATED.get(name)
    if figure is None or candidate is None:
        return None
    margin = margins.get(name, figure.margin)
    if baseline is None:
        return Row(set_name, name, None, candidate, margin, NEW)
    worse_by = (baseline - candidate) if figure.better == HIGHER else (candidate - baseline)
    verdict = REGRESSED if worse_by > margin + 1e-9 else IMPROVED if worse_by < -1e-9 else OK
    return Row(set_name, name, baseline, candidate, margin, verdict)


def compare(baseline: Mapping[str, Mapping[str, Any]], candidate: Mapping[str, Mapping[str, Any]],
            baseline_bundle: str, candidate_bundle: str, changes: list[dict[str, Any]] | None = None,
            margins: Mapping[str, float] | None = None) -> GateReport:
    """Every gated figure of every set the candidate measured. A set the baseline lacks is reported, not
    gated (there is nothing to regress from); a figure the candidate lacks is left out."""
    rows = []
    for set_name, figures in candidate.items():
        before = baseline.get(set_name, {})
        for name in (*GATED, *ABSOLUTE):
            row = judge_row(set_name, name, _number(before.get(name)), _number(figures.get(name)), margins or {})
            if row is not None:
                rows.append(row)
    return GateReport(baseline_bundle, candidate_bundle, rows, list(changes or []))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def parse_margins(pairs: list[str]) -> dict[str, float]:
    """`figure=value` overrides from the command line; an unknown figure or a negative value is an error."""
    margins = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in GATED:
            raise ValueError(f"unknown gated figure {name!r}: one of {', '.join(GATED)}")
        margin = float(value)
        if margin < 0:
            raise ValueError(f"a margin is not negative: {pair}")
        margins[name] = margin
    return margins
