"""Page citations on real PDFs: does the answer cite the evidence page?

The six SEC filings in `../shared/data/pdfs` are ingested as one tenant through the normal path (one
section per page, so every chunk carries its 1-based page). Each of the 13 questions in
`questions_for_sample_pdfs.json` is asked through `AnswerService.ask`; a question is a hit when one of
the answer's citations is the evidence document at the evidence page. The file gives ZERO-based page
indexes and Citadel's pages are 1-based, so the evidence page is `page_index_zero_based + 1`.
The report also says, per question, whether (and at which rank) the evidence page was among the
passages the gate saw, and the gate's coverage, so a miss can be told apart: retrieval never found the
page, the gate refused, or the answer cited another page.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from citadel.eval.rag import SHARED_DATA
from citadel.ingest.sources import document_id_for

DEFAULT_PDFS = SHARED_DATA / "pdfs"
QUESTIONS_FILE = "questions_for_sample_pdfs.json"
DEFAULT_TENANT = "sec-filings"
EVAL_USER = "pdf-eval"

Progress = Callable[[str, int, int], None]


def load_questions(pdf_dir: Path | str = DEFAULT_PDFS) -> list[dict[str, Any]]:
    """Questions with their evidence as (document id, 1-based page) pairs."""
    records = json.loads((Path(pdf_dir) / QUESTIONS_FILE).read_text(encoding="utf-8"))
    questions = []
    for record in records:
        evidence = sorted({(document_id_for(Path(e["doc_name"] + ".pdf")), int(e["page_index_zero_based"]) + 1)
                           for e in record.get("evidence") or []})
        questions.append({"id": record.get("financebench_id") or str(len(questions)),
                          "question": record["question"],
                          "document_id": document_id_for(Path(record["doc_name"] + ".pdf")),
                          "evidence": evidence})
    return questions


def ensure_indexed(runtime, pdf_dir: Path | str = DEFAULT_PDFS, tenant: str = DEFAULT_TENANT,
                   progress: Progress | None = None) -> dict[str, Any]:
    """Ingest the PDFs (idempotent: unchanged files are skipped)."""
    from citadel.ingest.sources import AclSpec, discover

    files = [f for f in discover([Path(pdf_dir)]) if f.path.suffix.lower() == ".pdf"]
    if not files:
        raise FileNotFoundError(f"no PDFs found in {pdf_dir}")
    report = runtime.ingestor(progress=progress).ingest(tenant, files, AclSpec.from_groups(["*"]), actor="eval-pdfs")
    data = report.to_dict()
    return {key: data[key] for key in ("status", "documents", "published", "unchanged", "failed", "chunks",
                                       "partition_chunks", "seconds")}


def evaluate(runtime, questions: list[dict[str, Any]], tenant: str = DEFAULT_TENANT,
             progress: Progress | None = None) -> dict[str, Any]:
    from citadel.types import Principal

    principal = Principal(tenant, EVAL_USER, frozenset())
    rows, started = [], time.perf_counter()
    for done, question in enumerate(questions, start=1):
        evidence = set(question["evidence"])
        began = time.perf_counter()
        response = runtime.answer_service.ask(principal, question["question"])
        seconds = time.perf_counter() - began
        cited = [(c["document_id"], c.get("page")) for c in response.citations]
        seen = [(p.document_id, p.page) for p in response.passages]
        ranks = [rank for rank, s in enumerate(seen, start=1) if s in evidence]
        rows.append({
            "id": question["id"],
            "question": question["question"],
            "evidence_pages": [f"{d} p.{p}" for d, p in sorted(evidence)],
            "cited_pages": [f"{d} p.{p}" for d, p in cited],
            "hit": any(c in evidence for c in cited),
            "evidence_retrieved": bool(ranks),
            "evidence_rank": ranks[0] if ranks else None,  # 1-based among the passages the gate saw
            "gate_coverage": None if response.gate is None else round(response.gate.coverage, 3),
            "right_document_cited": any(d == question["document_id"] for d, _ in cited),
            "refused": response.refused,
            "reason": response.reason,
            "ms": round(seconds * 1000.0, 1),
        })
        if progress:
            progress("ask", done, len(questions))
    return {
        "questions": len(rows),
        "page_hits": sum(r["hit"] for r in rows),
        "evidence_retrieved": sum(r["evidence_retrieved"] for r in rows),
        "right_document_cited": sum(r["right_document_cited"] for r in rows),
        "refused": sum(r["refused"] for r in rows),
        "seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
    }


def run(runtime, pdf_dir: Path | str = DEFAULT_PDFS, tenant: str = DEFAULT_TENANT,
        progress: Progress | None = None) -> dict[str, Any]:
    build = ensure_indexed(runtime, pdf_dir, tenant, progress)
    report = evaluate(runtime, load_questions(pdf_dir), tenant, progress)
    report["build"] = build
    return report


def format_table(report: dict[str, Any]) -> str:
    lines = [f"page hits: {report['page_hits']}/{report['questions']}  "
             f"(evidence page retrieved: {report['evidence_retrieved']}, right document cited: "
             f"{report['right_document_cited']}, refused: {report['refused']})"]
    for row in report["rows"]:
        mark = "HIT " if row["hit"] else "miss"
        seen = f"evidence at passage {row['evidence_rank']}" if row.get("evidence_rank") else "evidence not retrieved"
        refused = f" [refused: {row['reason']}]" if row["refused"] else ""
        lines.append(f"{mark} {row['id']}: evidence {', '.join(row['evidence_pages'])}; cited "
                     f"{', '.join(row['cited_pages']) or '-'}{refused} "
                     f"({seen}, gate coverage {row.get('gate_coverage')})")
    return "\n".join(lines)
