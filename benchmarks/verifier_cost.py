"""What the claim verifier (citadel/quality/verifier.py) costs per answer, beside the answer's
total, and where its judge threshold sits.

Asks the paraphrase set's dev split (never its test split) on a home holding the four handbook tenants
(default: /work/measure/i26/home, MiniLM, built by `citadel eval rag --set tests/regression/paraphrase`)
with the shipped config (trained reader as the judge, extractive generator), twice after a warm-up, and
prints the p50 / p90 of the `verify` stage and of `total` over the answers the verifier ran on (same
run, side by side), with the verdicts' counts.

`--choose`: for the threshold: every claim of those answers is judged against its own cited source
(supported: the extractive generator quotes it) and against the cited source of another question's
answer (unsupported), and the share of each the judge keeps / removes at several thresholds. The shipped
`answer.verifier_min_probability` (0.1) keeps every supported dev claim.

Measured 2026-12-05 (2 cores shared, trained reader onnx int8, 170 dev questions × 2): 132 of 340 asks
answered and verified, 276 claims, all kept (the extractive generator quotes its sources, so most
claims are settled as quotes without the judge); verify p50 0.51 ms / p90 382 ms (when the judge reads
a claim that is not a verbatim quote) beside a total of p50 869 ms / p90 1,278 ms per verified answer.

    python benchmarks/verifier_cost.py [--home DIR] [--threads 2] [--choose]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citadel.config import load_config  # noqa: E402
from citadel.eval.rag import PARAPHRASE_SET, load_set  # noqa: E402
from citadel.quality.verifier import ClaimVerifier, judge_texts  # noqa: E402
from citadel.answer.validator import marker_numbers, split_claims, strip_markers  # noqa: E402
from citadel.types import Principal  # noqa: E402
from citadel.wiring import Wiring  # noqa: E402

HOME = Path("/work/measure/i26/home")
ROUNDS = 2
THRESHOLDS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


class Capturing(ClaimVerifier):
    """The wired verifier, remembering what each answer's verify pass read (for --choose)."""

    def __init__(self, inner: ClaimVerifier):
        super().__init__(inner.judge, inner.settings, inner.today)
        self.seen: list[tuple[str, list]] = []

    def verify(self, text, sources, recomputed=None):
        self.seen.append((text, list(sources)))
        return super().verify(text, sources, recomputed)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 2) if ordered else 0.0


def main() -> None:
    args = sys.argv[1:]
    home = Path(args[args.index("--home") + 1]) if "--home" in args else HOME
    threads = args[args.index("--threads") + 1] if "--threads" in args else "2"
    os.environ.setdefault("OMP_NUM_THREADS", threads)
    config = load_config(environ={"CITADEL_HOME": str(home), "CITADEL_EMBEDDING__BACKEND": "minilm",
                                  "CITADEL_EMBEDDING__TORCH_THREADS": threads,
                                  "CITADEL_ANSWER__READER_THREADS": threads})
    wiring = Wiring(config)
    service = wiring.answer_service
    if service.verifier is None:
        sys.exit("answer.verifier is off in this config")
    service.verifier = Capturing(service.verifier)
    items = [i for i in load_set(PARAPHRASE_SET, split="dev")]
    principal_of = {i.id: Principal(i.tenant, i.user, frozenset(i.groups)) for i in items}
    service.ask(principal_of[items[0].id], "warm-up question about annual leave")
    verify_ms, total_ms, answered_total_ms = [], [], []
    counts = {"answers": 0, "verified": 0, "claims": 0, "kept": 0, "removed": 0, "corrected": 0,
              "judge_skipped": 0}
    for _ in range(ROUNDS):
        for item in items:
            response = service.ask(principal_of[item.id], item.question)
            counts["answers"] += 1
            total_ms.append(response.timings_ms["total"])
            if response.verification is None:
                continue
            counts["verified"] += 1
            verify_ms.append(response.timings_ms.get("verify", 0.0))
            answered_total_ms.append(response.timings_ms["total"])
            for key in ("claims", "kept", "removed", "corrected"):
                counts[key] += response.verification[key]
            counts["judge_skipped"] += int(response.verification["judge_skipped"])
    report = {"home": str(home), "threads": threads, "dev_questions": len(items), "rounds": ROUNDS,
              "judge": getattr(service.verifier.judge, "model_id", None), "counts": counts,
              "verify_ms": {"p50": percentile(verify_ms, 0.5), "p90": percentile(verify_ms, 0.9)},
              "total_ms_verified_answers": {"p50": percentile(answered_total_ms, 0.5),
                                            "p90": percentile(answered_total_ms, 0.9)},
              "total_ms_all": {"p50": percentile(total_ms, 0.5)},
              "verify_share_p50": round(statistics.median(v / t for v, t in zip(verify_ms, answered_total_ms)), 4)
              if verify_ms else None}
    if "--choose" in args:
        report["threshold"] = choose(service.verifier)
    print(json.dumps(report, indent=2))


def choose(verifier: Capturing) -> dict:
    """The judge's probability of each dev claim against its own cited source and against another
    answer's source (the next answer's first source whose document differs)."""
    judge = verifier.judge
    seen = verifier.seen[: len(verifier.seen) // ROUNDS]  # one round: the second repeats it
    supported, unsupported = [], []
    for index, (text, sources) in enumerate(seen):
        by_number = {s.number: s for s in sources}
        others = [s for _, other in seen[index + 1:] + seen[:index] for s in other[:1]]
        for claim in split_claims(text):
            cited = [by_number[n] for n in dict.fromkeys(marker_numbers(claim)) if n in by_number]
            body = strip_markers(claim)
            if not cited or body.startswith("(Shortened"):
                continue
            supported.append(max(judge.score(body, judge_texts(body, cited)) or [0.0]))
            documents = {s.passage.document_id for s in cited}
            foreign = next((s for s in others if s.passage.document_id not in documents), None)
            if foreign is not None:
                unsupported.append(max(judge.score(body, judge_texts(body, [foreign])) or [0.0]))
    return {"supported_claims": len(supported), "unsupported_claims": len(unsupported),
            "supported_min": round(min(supported), 4) if supported else None,
            "supported_p01": percentile(supported, 0.01), "unsupported_p50": percentile(unsupported, 0.5),
            "at": {str(t): {"supported_kept": round(sum(p >= t for p in supported) / max(1, len(supported)), 4),
                            "unsupported_removed": round(sum(p < t for p in unsupported) / max(1, len(unsupported)), 4)}
                   for t in THRESHOLDS}}


if __name__ == "__main__":
    main()
