"""Can any signal the confidence gate has tell SQuAD 2.0's unanswerable questions from answerable ones?

For a seeded sample of questions (a different seed from `eval_squad.py`'s reported sample) it asks each
through the real answer path and records, over the top passages the gate sees: the gate's IDF-weighted
coverage, the best vector score, the best coverage by a single sentence and by two adjacent sentences,
and the IDF of the rarest question term no passage has. Prints the AUC of each for "unanswerable"
(0.5 = no signal; refusing at F1 0.85 needs far more than any of them gives).

    CITADEL_HOME=var/squad python benchmarks/squad_separability.py [--sample 600] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from citadel.answer.gate import term_idf, weighted_coverage  # noqa: E402
from citadel.eval import squad  # noqa: E402
from citadel.text import term_set
from citadel.types import Principal  # noqa: E402
from citadel.wiring import Wiring  # noqa: E402

SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
TOP_PASSAGES = 3


def features(question: str, passages, idf) -> dict[str, float]:
    terms = term_set(question)
    top = passages[:TOP_PASSAGES]
    sentences = [SENTENCE_BREAK.split(p.text) for p in top]
    singles = [s for group in sentences for s in group]
    pairs = [f"{a} {b}" for group in sentences for a, b in zip(group, group[1:])] or singles
    covered = set().union(*(term_set(f"{p.title}\n{p.heading}\n{p.text}") for p in top)) if top else set()
    return {"best_sentence": max((weighted_coverage(terms, term_set(s), idf) for s in singles), default=0.0),
            "best_two_sentences": max((weighted_coverage(terms, term_set(s), idf) for s in pairs), default=0.0),
            "rarest_missing_idf": max((idf[t] for t in terms - covered), default=0.0)}


def auc(positives: list[float], negatives: list[float]) -> float:
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return round(wins / (len(positives) * len(negatives)), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=600)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    wiring = Wiring()
    data = squad.load_squad()
    squad.ensure_indexed(wiring, data)
    idf = term_idf(wiring.partitions.get(squad.DEFAULT_TENANT))
    principal = Principal(squad.DEFAULT_TENANT, "separability", frozenset())
    rows = []
    for question in squad.sample_questions(data, args.sample, args.seed):
        response = wiring.answer_service.ask(principal, question.question)
        gate = response.gate
        rows.append({"unanswerable": question.impossible,
                     # low coverage / low similarity should mean "unanswerable": negate to score that way
                     "coverage": -(gate.coverage if gate else 0.0),
                     "vector_score": -((gate.vector_score or 0.0) if gate else 0.0),
                     **{k: (-v if k != "rarest_missing_idf" else v)
                        for k, v in features(question.question, response.passages, idf).items()}})
    names = [k for k in rows[0] if k != "unanswerable"]
    print(json.dumps({"questions": len(rows), "unanswerable": sum(r["unanswerable"] for r in rows),
                      "auc_unanswerable": {n: auc([r[n] for r in rows if r["unanswerable"]],
                                                  [r[n] for r in rows if not r["unanswerable"]]) for n in names}}))


if __name__ == "__main__":
    main()
