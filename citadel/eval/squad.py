"""Refusal on SQuAD 2.0: does Citadel refuse the unanswerable questions?

Each SQuAD article becomes one document of a tenant, its paragraphs sections under the article title
(one paragraph = one section, so parent-section expansion hands the generator the paragraph). A seeded
sample of questions goes through `AnswerService.ask`:
- refusal precision / recall / F1 treat "refuse" as the positive class and the unanswerable
  (`is_impossible`) questions as its truth;
- answer recall, over the answerable questions: answered (not refused) and a gold answer text appears,
  normalised as in the official SQuAD script, in the answer or in the cited passages (the cited chunk's
  whole section, i.e. the paragraph the generator was shown).
"""

from __future__ import annotations

import json
import random
import string
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from citadel import regex
from citadel.eval.rag import SHARED_DATA, _SectionTexts
from citadel.ingest.sources import document_id_for

DEFAULT_FILE = SHARED_DATA / "squad2" / "dev-v2.0.json"
DEFAULT_TENANT = "squad2-dev"
DEFAULT_SAMPLE = 300
DEFAULT_SEED = 13
EVAL_USER = "squad-eval"

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class SquadQuestion:
    id: str
    question: str
    document_id: str
    answers: tuple[str, ...]
    impossible: bool


@dataclass
class SquadData:
    articles: list[dict[str, Any]]
    questions: list[SquadQuestion]


def article_id(title: str) -> str:
    return document_id_for(Path(title.replace("/", "-") + ".txt"))


def load_squad(path: Path | str = DEFAULT_FILE) -> SquadData:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    articles, questions = data["data"], []
    for article in articles:
        document = article_id(article["title"])
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                impossible = bool(qa.get("is_impossible"))
                answers = () if impossible else tuple(dict.fromkeys(a["text"] for a in qa.get("answers") or []))
                questions.append(SquadQuestion(str(qa["id"]), qa["question"], document, answers, impossible))
    return SquadData(articles, questions)


def sample_questions(data: SquadData, size: int = DEFAULT_SAMPLE, seed: int = DEFAULT_SEED) -> list[SquadQuestion]:
    """A seeded uniform sample (all questions when size is larger), in a stable order."""
    questions = sorted(data.questions, key=lambda q: q.id)
    if size >= len(questions):
        return questions
    return random.Random(seed).sample(questions, size)


def as_documents(data: SquadData, tenant: str):
    from citadel.ingest.sources import InlineDocument
    from citadel.types import Block, ParsedDocument, Section

    for article in data.articles:
        title = article["title"].replace("_", " ")
        sections = [Section((title,), None, [Block("text", p["context"])]) for p in article["paragraphs"]]
        source = f"squad2:{tenant}/{article_id(article['title'])}"
        parsed = ParsedDocument(title=title, sections=sections, source=source, format="text")
        yield InlineDocument(document_id=article_id(article["title"]), source=source, parsed=parsed)


def ensure_indexed(runtime, data: SquadData, tenant: str = DEFAULT_TENANT, progress: Progress | None = None) -> dict:
    from citadel.ingest.sources import AclSpec

    report = runtime.ingestor(progress=progress).ingest(tenant, list(as_documents(data, tenant)),
                                                        AclSpec.from_groups(["*"]), actor="eval-squad")
    result = report.to_dict()
    return {key: result[key] for key in ("status", "documents", "published", "unchanged", "failed", "chunks",
                                         "partition_chunks", "seconds")}


# Answer normalisation of the official SQuAD evaluation script: lower case, no punctuation, no
# articles, single spaces.
_ARTICLES = regex.compile("eval.squad.articles", r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalise_answer(text: str) -> str:
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def contains_answer(haystack: str, answers: tuple[str, ...]) -> bool:
    normalised = f" {normalise_answer(haystack)} "
    return any(f" {normalise_answer(a)} " in normalised for a in answers if normalise_answer(a))


def evaluate(runtime, questions: list[SquadQuestion], tenant: str = DEFAULT_TENANT,
             progress: Progress | None = None) -> dict[str, Any]:
    from citadel.types import Principal

    principal = Principal(tenant, EVAL_USER, frozenset())
    sections = _SectionTexts(runtime)
    rows, started = [], time.perf_counter()
    for done, question in enumerate(questions, start=1):
        response = runtime.answer_service.ask(principal, question.question)
        found = False
        if not response.refused and question.answers:
            cited = "\n".join(sections.text(c["chunk_id"]) for c in response.citations)
            found = contains_answer(f"{response.answer}\n{cited}", question.answers)
        rows.append({"id": question.id, "impossible": question.impossible, "refused": response.refused,
                     "reason": response.reason, "answer_found": found,
                     "right_document": any(c["document_id"] == question.document_id for c in response.citations)})
        if progress:
            progress("ask", done, len(questions))
    return summarise(rows, time.perf_counter() - started)


def summarise(rows: list[dict[str, Any]], seconds: float | None = None) -> dict[str, Any]:
    impossible = [r for r in rows if r["impossible"]]
    answerable = [r for r in rows if not r["impossible"]]
    refused = [r for r in rows if r["refused"]]
    true_refusals = sum(r["refused"] for r in impossible)
    precision = true_refusals / len(refused) if refused else 0.0
    recall = true_refusals / len(impossible) if impossible else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    reasons: dict[str, int] = {}
    for r in refused:
        reasons[str(r["reason"])] = reasons.get(str(r["reason"]), 0) + 1
    report = {
        "questions": len(rows),
        "unanswerable": len(impossible),
        "answerable": len(answerable),
        "refused": len(refused),
        "refusal_precision": round(precision, 4),
        "refusal_recall": round(recall, 4),
        "refusal_f1": round(f1, 4),
        "answer_recall": round(sum(r["answer_found"] for r in answerable) / len(answerable), 4) if answerable else 0.0,
        "answered_when_answerable": round(sum(not r["refused"] for r in answerable) / len(answerable), 4)
        if answerable else 0.0,
        "false_refusals": sum(r["refused"] for r in answerable),
        "refusal_reasons": dict(sorted(reasons.items())),
    }
    if seconds is not None:
        report["seconds"] = round(seconds, 1)
    return report


def run(runtime, path: Path | str = DEFAULT_FILE, size: int = DEFAULT_SAMPLE, seed: int = DEFAULT_SEED,
        tenant: str = DEFAULT_TENANT, progress: Progress | None = None) -> dict[str, Any]:
    data = load_squad(path)
    build = ensure_indexed(runtime, data, tenant, progress)
    questions = sample_questions(data, size, seed)
    report = evaluate(runtime, questions, tenant, progress)
    report.update(sample=size, seed=seed, build=build)
    return report


def format_table(report: dict[str, Any]) -> str:
    keys = ("questions", "unanswerable", "answerable", "refused", "refusal_precision", "refusal_recall",
            "refusal_f1", "answer_recall", "answered_when_answerable", "false_refusals")
    lines = [f"{'metric':<26} value", f"{'-' * 26} -----"]
    lines += [f"{key:<26} {report[key]}" for key in keys]
    lines.append(f"{'refusal_reasons':<26} {report['refusal_reasons']}")
    return "\n".join(lines)
