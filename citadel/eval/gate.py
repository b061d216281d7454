"""The release gate's runs (DESIGN.md §11; `citadel eval gate`): the labeled sets on one bundle.

A bundle is given as a config file (the effective configuration of this code tree under it) or as a
recorded measurement (JSON written by `citadel eval gate --record`, e.g. the baseline CI compares
against: tests/regression/gate/baseline.json). Each config's figures come from the same four sets:

- **regression**: the labeled RAG regression set (tests/regression/rag_set.jsonl);
- **paraphrase_test**: the paraphrase set's test split (how employees ask; never tuned on);
- **runs_parts**: two-part questions through a run (citadel/eval/runs_parts.py);
- **judge**: the bundle's judge (the reader behind the claim verifier, at the bundle's own threshold,
  after the figure check as answers meet it) against the two annotators' consensus, on the test half.

The `fast` subset (CI) takes every 4th item of the two answer sets in file order and 4 pairs; `full`
takes everything (24 pairs). A recorded measurement names its subset, and only a measurement of the
same subset is compared with it. The verdict: citadel/quality/gate.py.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from citadel.eval import rag
from citadel.quality.bundle import Bundle, diff, effective_bundle

SETS = ("regression", "paraphrase_test", "runs_parts", "judge")


@dataclass(frozen=True)
class Subset:
    name: str
    every: int  # every n-th item of the regression and paraphrase sets, in file order
    pairs: int  # two-part questions of the runs' set


SUBSETS = {"fast": Subset("fast", 4, 4), "full": Subset("full", 1, 24)}
ANSWER_FIGURES = ("citation_accuracy", "source_recall", "refusal_precision", "refusal_recall",
                  "unsupported_claim_rate", "draft_unsupported_rate", "leaks", "forbidden_citations", "errors",
                  "items", "answer_sentences")
Progress = Callable[[str, int, int], None]


@dataclass
class Measurement:
    """What one bundle scored on each set."""

    bundle: Bundle
    subset: str
    sets: dict[str, dict[str, Any]]
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"bundle": self.bundle.to_dict(), "subset": self.subset, "sets": self.sets,
                "seconds": round(self.seconds, 1)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Measurement":
        return cls(Bundle.from_dict(data["bundle"]), str(data["subset"]), dict(data["sets"]),
                   float(data.get("seconds", 0.0)))


def load_measurement(path: Path | str) -> Measurement:
    return Measurement.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def every_nth(items: Sequence[rag.RagItem], every: int) -> list[rag.RagItem]:
    return list(items[::every])


def answer_figures(runtime, items: Sequence[rag.RagItem], progress: Progress | None = None) -> dict[str, Any]:
    report = rag.evaluate(runtime, items, progress=progress)
    return {key: report[key] for key in ANSWER_FIGURES}


def runs_figures(runtime, pairs: int) -> dict[str, Any]:
    from citadel.eval import runs_parts

    return runs_parts.summary(runs_parts.run(runtime, runs_parts.pairs(pairs)))


def judge_figures(runtime) -> dict[str, Any]:
    """The bundle's judge on the judge set at the bundle's verifier threshold; nothing when the bundle
    has no claim verifier (there is no judge to measure)."""
    from citadel.eval import judge as judge_eval

    answer = runtime.config.answer
    if not answer.verifier:
        return {}
    reader = runtime.reader
    result = judge_eval.run(reader.score, reader.model_id, threshold=answer.verifier_min_probability, figures=True)
    test = result["test"]
    return {"kappa_judge_consensus": test["kappa_judge_consensus"], "trusted": result["trusted"],
            "threshold": result["threshold"], "items": test["items"]}


def measure(runtime, subset: Subset, sets: Sequence[str] = SETS, progress: Progress | None = None) -> Measurement:
    """Every chosen set on one runtime (its tenants built once per home)."""
    started = time.perf_counter()
    rag.build_tenants(runtime, progress=progress)
    figures: dict[str, dict[str, Any]] = {}
    if "regression" in sets:
        figures["regression"] = answer_figures(runtime, every_nth(rag.load_set(), subset.every), progress)
    if "paraphrase_test" in sets:
        items = every_nth(rag.load_set(rag.PARAPHRASE_SET, split="test"), subset.every)
        figures["paraphrase_test"] = answer_figures(runtime, items, progress)
    if "runs_parts" in sets:
        figures["runs_parts"] = runs_figures(runtime, subset.pairs)
    if "judge" in sets:
        figures["judge"] = judge_figures(runtime)
    return Measurement(effective_bundle(runtime.config), subset.name, figures, time.perf_counter() - started)


def changes(baseline: Bundle, candidate: Bundle) -> list[dict[str, Any]]:
    return [{"key": c.key, "old": c.old, "new": c.new} for c in diff(baseline, candidate)]
