"""What masking personal data costs per span: the p50 and p99 of preparing one
span's attributes as `citadel.tracing.emit_span` does (bounded, card numbers and secrets redacted,
personal data masked), against the same without the mask.

Span attributes are made the way the answer path makes them: a request id, a stage, a reason, the
degraded stages, a model id, and a text field cut from the handbooks in ../shared/data/corpora (a
question-sized sentence, one span in four carrying an e-mail address, a phone number or an IBAN).
The masker is the patterns alone, and the patterns with 1,000 known user names (a catalog's users).

    python benchmarks/pii_mask.py [--spans 5000] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citadel import tracing  # noqa: E402
from citadel.guardrails.personal import PATTERNS_ONLY, PersonalDataMasker  # noqa: E402
from citadel.guardrails.redaction import redacted_text  # noqa: E402

CORPORA = ROOT.parent / "shared" / "data" / "corpora"
PERSONAL = ["write to jane.doe@example.com", "call +44 20 7946 0958", "refund to GB82 WEST 1234 5698 7654 32",
            "from 192.168.1.20"]
FALLBACK = ("The employee may request leave in advance and the manager approves it within five working days; "
            "travel costs are reimbursed with receipts. Questions go to the help desk.")


def sentences(limit: int = 20_000) -> list[str]:
    """Question-sized sentences of the handbooks (the fallback sentence when they are absent)."""
    found: list[str] = []
    for path in sorted(CORPORA.rglob("*.md"))[:3_000] if CORPORA.exists() else []:
        for line in path.read_text(errors="ignore").splitlines():
            line = line.strip()
            if 40 <= len(line) <= 300 and not line.startswith(("#", "|", "```")):
                found.append(line)
        if len(found) >= limit:
            break
    return found or [FALLBACK]


def span_fields(rng: random.Random, texts: list[str]) -> dict:
    text = rng.choice(texts)
    if rng.random() < 0.25:
        text = f"{text} {rng.choice(PERSONAL)}"
    return {"request_id": uuid.uuid4().hex, "stage": rng.choice(["route", "search", "rerank", "gate", "generate"]),
            "reason": rng.choice([None, "low_coverage", "no_eligible_source"]), "degraded": ["reranker_skipped"],
            "model_id": "extractive", "question": text}


def prepare(fields: dict) -> dict:
    """The attributes emit_span would set (what it costs; no span is exported)."""
    return {name: tracing._attribute(value) for name, value in fields.items() if value is not None}


def unmasked(fields: dict) -> dict:
    """The same before the mask: bounded and redacted only."""
    return {name: ([redacted_text(str(v))[:256] for v in value] if isinstance(value, list)
                   else redacted_text(str(value))[:256]) for name, value in fields.items() if value is not None}


def timings_us(function, spans: list[dict]) -> list[float]:
    out = []
    for fields in spans:
        started = time.perf_counter()
        function(fields)
        out.append((time.perf_counter() - started) * 1e6)
    return out


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"p50_us": round(statistics.median(ordered), 1), "p99_us": round(ordered[int(0.99 * (len(ordered) - 1))], 1),
            "mean_us": round(statistics.fmean(ordered), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=5_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = random.Random(7)
    texts = sentences()
    spans = [span_fields(rng, texts) for _ in range(args.spans)]
    names = PersonalDataMasker([f"user{i:04d}" for i in range(500)] + [f"Name{i} Surname{i}" for i in range(500)])
    timings_us(prepare, spans[:200])  # warm up
    results = {"spans": len(spans), "texts": len(texts), "unmasked": summary(timings_us(unmasked, spans))}
    for label, masker in (("masked_patterns", PATTERNS_ONLY), ("masked_patterns_and_1000_names", names)):
        tracing.set_span_masker(masker)
        results[label] = summary(timings_us(prepare, spans))
    tracing.set_span_masker(PATTERNS_ONLY)
    results["mask_p50_overhead_us"] = round(results["masked_patterns"]["p50_us"] - results["unmasked"]["p50_us"], 1)
    if args.json:
        print(json.dumps(results))
        return
    for key, value in results.items():
        print(f"{key:34s} {value}")


if __name__ == "__main__":
    main()
