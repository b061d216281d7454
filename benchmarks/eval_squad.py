"""Refusal on SQuAD 2.0: refusal precision / recall / F1 on the unanswerable questions and answer
recall on the answerable ones, through the real answer path (see citadel/eval/squad.py).

    CITADEL_HOME=var/squad python benchmarks/eval_squad.py [--sample 300] [--seed 13] [--json]

The articles are ingested once per CITADEL_HOME (re-runs skip unchanged documents); the embedder and
the answer settings (gate thresholds, generator, reranker) come from the normal configuration
(`CITADEL_CONFIG`, `CITADEL_ANSWER__...`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from citadel.eval import squad  # noqa: E402
from citadel.wiring import Wiring  # noqa: E402

PROGRESS_STEPS = 10


def progress_lines():
    """Plain progress lines on stderr, about every tenth of each stage (benchmarks do not import the
    CLI, whose rich progress bars live in citadel.cli.runtime)."""
    last: dict[str, int] = {}

    def log(stage: str, done: int, total: int) -> None:
        if done == total or done - last.get(stage, 0) >= max(1, total // PROGRESS_STEPS):
            last[stage] = done
            print(f"[{stage}] {done}/{total}", file=sys.stderr, flush=True)

    return log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=Path, default=squad.DEFAULT_FILE, help="SQuAD 2.0 JSON file.")
    parser.add_argument("--sample", type=int, default=squad.DEFAULT_SAMPLE, help="Questions to ask (seeded sample).")
    parser.add_argument("--seed", type=int, default=squad.DEFAULT_SEED)
    parser.add_argument("--tenant", default=squad.DEFAULT_TENANT)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    args = parser.parse_args(argv)
    if not args.file.exists():
        print(f"SQuAD file not found: {args.file} (see ../shared/data/SOURCES.md)", file=sys.stderr)
        return 2
    wiring = Wiring(config_path=args.config)
    started = time.perf_counter()
    report = squad.run(wiring, args.file, args.sample, args.seed, args.tenant, progress=progress_lines())
    report["total_seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=1) if args.json else squad.format_table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
