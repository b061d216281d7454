"""What a reviewer reads beside a proposal or a held answer: a few lines of evidence, each the sentence
of one document that shares the most terms with what is asked, with its citation."""

from __future__ import annotations

from typing import Sequence

from citadel.text import content_terms, split_sentences
from citadel.types import Passage, section_url

# A reviewer sees this many lines of evidence beside a proposal, each at most this long.
REVIEW_EVIDENCE_LINES = 2
MAX_EVIDENCE_QUOTE_CHARS = 280


def citation_label(passage: Passage) -> str:
    """Where a passage is: document title, section, page when it has one."""
    label = f"{passage.title}, {passage.section_title}" if passage.section_title else passage.title
    return f"{label}, p. {passage.page}" if passage.page is not None else label


def evidence_lines(passages: Sequence[Passage], about: str, most: int = REVIEW_EVIDENCE_LINES) -> list[dict[str, str]]:
    """The lines of evidence a reviewer reads beside a proposal: for the passages sharing the most
    terms with `about` (the step's ask and arguments), one document each, the sentence that shares the
    most, with its citation. Ties go to the retrieval score."""
    wanted = set(content_terms(about))
    ranked = sorted(passages, key=lambda p: (-len(wanted & set(content_terms(f"{p.heading} {p.text}"))), -p.score))
    lines: list[dict[str, str]] = []
    seen: set[str] = set()
    for passage in ranked:
        if passage.document_id in seen or len(lines) >= most:
            continue
        seen.add(passage.document_id)
        sentences = split_sentences(passage.text) or [passage.text]
        best = max(sentences, key=lambda s: len(wanted & set(content_terms(s))))
        quote = best if len(best) <= MAX_EVIDENCE_QUOTE_CHARS else best[:MAX_EVIDENCE_QUOTE_CHARS - 1] + "…"
        lines.append({"quote": quote, "citation": citation_label(passage), "chunk_id": passage.chunk_id,
                      "url": section_url(passage.document_id, passage.version, passage.chunk_id, best)})
    return lines
