"""Where the signals' thresholds sit: `signals.rephrase_min_similarity` and
`signals.low_best_score`.

**Rephrase.**
A rephrase is a user asking the same thing again in other words; a new topic must not count. The
handbook questions give both: every answerable item of the regression set (tests/regression/rag_set.jsonl)
and of the paraphrase set (tests/regression/paraphrase/, the same handbooks in users' own words) names
the section and the facts that answer it. Pairs of questions of one tenant are

- the same fact: same document and heading, and an expected fact in common (a rephrase);
- the same section, another fact; the same document, another section; another document (new topics,
  from the closest to the farthest),

and the script prints, for several thresholds, the share of each kind whose cosine (the configured
embedder's query vectors, MiniLM by default) reaches it.

Measured 2026-12-05 (MiniLM, 302 answerable items; 13 same-fact pairs, 40 same-section, 644 same-document,
10,657 other-document pairs):

    threshold  same fact  same section  same document  other document
    0.50       0.923      0.325         0.123          0.023
    0.55       0.538      0.250         0.073          0.010
    0.60       0.385      0.125         0.045          0.002
    0.65       0.154      0.100         0.022          0.001

0.55 is the shipped value: a question on another document counts 1% of the time and one on another
section of the same document 7%, while over half of the same-fact pairs count although the paraphrase
set words them as far from the plain question as its authors could (a situation told instead of a
question: median cosine 0.55); a user rephrasing after a poor answer usually stays closer. Few
same-fact pairs exist, so this is a sensible value, not a fitted one.

**Low best score** (`--home DIR`): the gate's vector score (the question's cosine to its closest top
passage) of each labelled question in an eval home's answer log (`citadel eval rag` over both sets), and
the share of answerable and of unanswerable questions under several thresholds. Measured 2026-12-05 on
/work/measure/i26/home (MiniLM; 340 answerable, 124 unanswerable questions):

    threshold  answerable  unanswerable
    0.30       0.009       0.032
    0.35       0.026       0.145
    0.40       0.091       0.258
    0.45       0.182       0.363

The unanswerable items are near-topic on purpose (same handbooks), so no threshold separates them; 0.35
is shipped: a few percent of questions the documents answer fall under it, so a share well above that
says users ask what the documents barely cover (or retrieval broke).

    python benchmarks/signal_thresholds.py [--backend minilm|hash] [--home DIR]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citadel.config import EmbeddingConfig  # noqa: E402
from citadel.embedding.factory import make_embedder  # noqa: E402
from citadel.eval.rag import DEFAULT_SET, PARAPHRASE_SET, RagItem, load_set  # noqa: E402

THRESHOLDS = (0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75)
SCORE_THRESHOLDS = (0.3, 0.35, 0.4, 0.45, 0.5)
KINDS = ("same fact", "same section", "same document", "other document")


def facts(item: RagItem) -> set[str]:
    return {fact.lower() for alternatives in item.expected_answer for fact in alternatives.split("|")}


def kind_of(a: RagItem, b: RagItem) -> str:
    if a.expected_documents[:1] != b.expected_documents[:1]:
        return "other document"
    if a.expected_heading != b.expected_heading:
        return "same document"
    return "same fact" if facts(a) & facts(b) else "same section"


def rephrase_table(backend: str) -> None:
    items = [i for i in load_set(DEFAULT_SET) + load_set(PARAPHRASE_SET)
             if i.expect == "answer" and i.expected_documents and i.expected_heading]
    embedder = make_embedder(EmbeddingConfig(backend=backend))
    vectors = embedder.embed_queries([i.question for i in items])
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    scores: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for a, b in itertools.combinations(range(len(items)), 2):
        if items[a].tenant == items[b].tenant:
            scores[kind_of(items[a], items[b])].append(float(vectors[a] @ vectors[b]))
    print(f"{len(items)} answerable items; pairs: " + ", ".join(f"{k} {len(v):,}" for k, v in scores.items()))
    print("threshold  " + "  ".join(f"{k:>14}" for k in KINDS))
    for threshold in THRESHOLDS:
        shares = [np.mean(np.asarray(scores[k]) >= threshold) if scores[k] else float("nan") for k in KINDS]
        print(f"{threshold:<9.2f}  " + "  ".join(f"{s:>14.3f}" for s in shares))


def best_score_table(home: Path) -> None:
    """The labelled questions' best scores as an eval run logged them (each question once)."""
    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.quality.signals import best_score

    expected = {i.question: i.expect for i in load_set(DEFAULT_SET) + load_set(PARAPHRASE_SET)}
    catalog = SQLiteCatalog(home / "catalog.sqlite")
    scores: dict[str, dict[str, float]] = {"answer": {}, "refuse": {}}
    for tenant in {t["tenant_id"] for t in catalog.list_tenants()}:
        for row in catalog.answer_log(tenant, limit=1_000_000):
            expect, score = expected.get(row["question"]), best_score(row["response"])
            if expect is not None and score is not None:
                scores[expect].setdefault(row["question"], score)
    catalog.close()
    answerable, unanswerable = (np.asarray(list(scores[k].values())) for k in ("answer", "refuse"))
    print(f"{len(answerable)} answerable, {len(unanswerable)} unanswerable questions")
    print("threshold  answerable  unanswerable")
    for threshold in SCORE_THRESHOLDS:
        below = (np.mean(answerable < threshold), np.mean(unanswerable < threshold))
        print(f"{threshold:<9.2f}  {below[0]:>10.3f}  {below[1]:>12.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--home", type=Path, help="An eval home whose answer log holds the labelled questions.")
    args = parser.parse_args()
    rephrase_table(args.backend)
    if args.home is not None:
        best_score_table(args.home)


if __name__ == "__main__":
    main()
