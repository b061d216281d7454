"""How runs end on two-part questions (the set and its judging: citadel/eval/runs_parts.py): each part asserted with its section cited, or named
as not confirmed with its closest evidence, and never an answer asserted from an unrelated section.

Pairs two answerable items of one tenant from the paraphrase set's **test** split
(tests/regression/paraphrase) whose expected documents differ, in a fixed order (file order, each item
paired with the next one it can pair with, tenants in turn), and asks "<q1> Also, <q2>" through a run:
the same orchestrator the runs API drives, synchronously, over an in-memory run store, on an existing
home (the four handbook tenants `citadel eval rag` builds), real MiniLM unless the environment says
otherwise. The reader, reranker and confirmation come from the environment (CITADEL_ANSWER__*).

Per part (item): "asserted" when the answer's assertion (the text before its first "don't confirm"
note) cites the item's expected section and no part of the item is named missing; "not_confirmed"
when a part of the item is named missing and the expected section is among the answer's citations;
else "missed". A pair passes when both parts do (target share >= 0.8). "unrelated": an answered run
whose assertion cites a section that is neither item's expected section.

    CITADEL_ANSWER__READER=trained CITADEL_ANSWER__RERANKER=reader CITADEL_ANSWER__CONFIRM=true \\
        python benchmarks/runs_two_part.py --home HOME [--pairs 24] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citadel.config import load_config  # noqa: E402
from citadel.eval.runs_parts import pairs, run, summary  # noqa: E402
from citadel.wiring import Wiring  # noqa: E402

TARGET = 0.8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=24)
    parser.add_argument("--limit", type=int, default=None, help="Run only the first N pairs (a smoke check).")
    args = parser.parse_args()
    environ = {**os.environ, "CITADEL_HOME": str(args.home)}
    environ.setdefault("CITADEL_EMBEDDING__BACKEND", "minilm")
    wiring = Wiring(load_config(environ=environ))
    chosen = pairs(args.pairs)[:args.limit]
    results = run(wiring, chosen)
    answer = wiring.config.answer
    print(json.dumps({
        "config": {"reader": answer.reader, "reranker": answer.reranker, "confirm": answer.confirm,
                   "generator": answer.generator, "embedding": wiring.config.embedding.backend},
        **summary(results), "target": TARGET, "results": results}, indent=1))


if __name__ == "__main__":
    main()
