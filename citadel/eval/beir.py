"""`citadel eval beir`: nDCG@10, recall@100 and MRR@10 of each retrieval mode on a BEIR dataset.

The corpus is ingested once as a tenant-wide tenant through the normal ingestion path (title as the
heading, abstract as the text), so the numbers measure Citadel's own legs, fusion and rerank.
Re-running skips unchanged documents (idempotent ingestion), so only the first run pays the embedding.
"""

from __future__ import annotations

import csv
import gzip
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from citadel.eval.metrics import mrr_at_k, ndcg_at_k, percentile, recall_at_k
from citadel.types import Block, ParsedDocument, Principal, Section

MODES = ("bm25", "dense", "hybrid", "hybrid+rerank")
NDCG_K, RECALL_K, MRR_K = 10, 100, 10
EVAL_USER = "beir-eval"


@dataclass
class BeirData:
    corpus: dict[str, tuple[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load_beir(directory: Path, split: str) -> BeirData:
    directory = Path(directory)
    corpus_path = directory / "corpus.jsonl.gz"
    opener = gzip.open if corpus_path.exists() else open
    corpus_path = corpus_path if corpus_path.exists() else directory / "corpus.jsonl"
    corpus = {}
    with opener(corpus_path, "rt", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            corpus[str(record["_id"])] = (record.get("title") or "", record.get("text") or "")
    queries = {}
    with open(directory / "queries.jsonl", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            queries[str(record["_id"])] = record["text"]
    qrels: dict[str, dict[str, int]] = {}
    with open(directory / "qrels" / f"{split}.tsv", encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            qrels.setdefault(str(row["query-id"]), {})[str(row["corpus-id"])] = int(row["score"])
    return BeirData(corpus, {q: queries[q] for q in qrels if q in queries}, qrels)


def as_documents(corpus: dict[str, tuple[str, str]], source_prefix: str):
    """Each BEIR document becomes one parsed document: the title is its heading."""
    from citadel.ingest.sources import InlineDocument

    for doc_id, (title, text) in corpus.items():
        heading = title or f"Document {doc_id}"
        parsed = ParsedDocument(title=heading, sections=[Section((heading,), None, [Block("text", text)])],
                                source=f"{source_prefix}/{doc_id}", format="text")
        yield InlineDocument(document_id=doc_id, source=parsed.source, parsed=parsed)


def ensure_indexed(runtime, tenant: str, data: BeirData, progress=None) -> dict:
    from citadel.ingest.sources import AclSpec

    documents = list(as_documents(data.corpus, f"beir:{tenant}"))
    report = runtime.ingestor(progress=progress).ingest(tenant, documents, AclSpec.from_groups(["*"]), actor="eval")
    return report.to_dict()


Ranker = Callable[[str], list[str]]


class ModeRanker:
    """Ranks document ids for a query with one mode, through the Retriever's own legs."""

    def __init__(self, runtime, tenant: str, depth: int, reranker=None, rerank_depth: int = 50):
        self._retriever = runtime.retriever
        self._principal = Principal(tenant, EVAL_USER, frozenset())
        self._partition, self._allowed = self._retriever.scope(self._principal)
        self._documents = self._partition.table.column("document_id").to_pylist()
        self._depth = depth
        self._reranker = reranker
        self._rerank_depth = rerank_depth

    def rank(self, query: str, mode: str) -> list[str]:
        plan = self._retriever.plan(len(self._allowed), len(self._partition))
        legs = self._retriever.legs(self._partition, query, self._allowed, plan, [], {}, k=self._depth,
                                    use_vector=mode != "bm25", use_keyword=mode != "dense")
        if mode == "bm25":
            rows = legs.keyword
        elif mode == "dense":
            rows = legs.vector
        else:
            fused = self._retriever.fuse(legs)
            rows = [row for row, _ in fused]
        ranked = _dedupe([self._documents[r] for r in rows])
        if mode == "hybrid+rerank" and self._reranker is not None:
            ranked = self._rerank(query, fused, ranked)
        return ranked

    def head(self, fused: list[tuple[int, float]]):
        """The fused list's first `rerank_depth` documents as passages carrying their fused scores
        (a reranker that blends with fusion reads them)."""
        from citadel.retrieval.retriever import passage_from_row

        head, seen = [], set()
        for row, score in fused:
            document = self._documents[row]
            if document not in seen:
                seen.add(document)
                head.append(passage_from_row(self._partition.row(row), float(score)))
            if len(head) == self._rerank_depth:
                break
        return head

    def fused(self, query: str) -> list[tuple[int, float]]:
        plan = self._retriever.plan(len(self._allowed), len(self._partition))
        return list(self._retriever.fuse(self._retriever.legs(self._partition, query, self._allowed, plan, [], {},
                                                              k=self._depth)))

    def _rerank(self, query: str, fused: list[tuple[int, float]], ranked: list[str]) -> list[str]:
        passages = self.head(fused)
        reordered = [p.document_id for p in self._reranker.rerank(query, passages, top_n=len(passages))]
        return _dedupe(reordered + ranked)


def _dedupe(documents: list[str]) -> list[str]:
    seen: set[str] = set()
    return [d for d in documents if not (d in seen or seen.add(d))]


def evaluate(ranker: ModeRanker, data: BeirData, mode: str, limit: int | None = None) -> dict:
    ndcg, recall, mrr, latencies = [], [], [], []
    query_ids = sorted(data.queries)[: limit or None]
    for query_id in query_ids:
        started = time.perf_counter()
        ranked = ranker.rank(data.queries[query_id], mode)
        latencies.append((time.perf_counter() - started) * 1000.0)
        relevant = data.qrels[query_id]
        ndcg.append(ndcg_at_k(ranked, relevant, NDCG_K))
        recall.append(recall_at_k(ranked, relevant, RECALL_K))
        mrr.append(mrr_at_k(ranked, relevant, MRR_K))
    count = len(query_ids)
    return {
        "mode": mode,
        "ndcg@10": round(sum(ndcg) / count, 4),
        "recall@100": round(sum(recall) / count, 4),
        "mrr@10": round(sum(mrr) / count, 4),
        "queries": count,
        "p50_ms": round(percentile(latencies, 50), 2),
    }
