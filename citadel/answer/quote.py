"""The sentences the reader reads for one answer, and their scores.

Both the confirmation of the asked fact (citadel/answer/confirm.py) and the extractive generator's
quotes read the same sentences of the same numbered sources, in the same order, so a shared memo
(citadel/reader/memo.py) scores each pair once. At most `MAX_SENTENCES` are read: a cheap
pre-selection keeps the sentences of the strongest sources that share a word with the question or
hold a value of the kind the question asks for, best sources first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from citadel.answer.slots import AskedSlot, holds_slot, subject_share
from citadel.prompting.source import Source
from citadel.reader.base import Reader
from citadel.text import content_terms, sentence_pieces

MAX_SENTENCES = 40
READ_SOURCES = 4


@dataclass(frozen=True)
class ScoredSentence:
    source_number: int
    position: int
    text: str
    list_item: bool
    probability: float
    holds_slot: bool
    subject_share: float


def preselected(question: str, slot: AskedSlot, sources: Sequence[Source],
                limit: int = MAX_SENTENCES, read_sources: int = READ_SOURCES) -> list[tuple[int, int, str, bool]]:
    """(source number, position, sentence, is a list item) to read, best sources first."""
    terms = set(content_terms(question)) | set(slot.subject)
    chosen: list[tuple[int, int, str, bool]] = []
    for source in list(sources)[:read_sources]:
        for position, (sentence, item) in enumerate(sentence_pieces(source.text)):
            words = set(content_terms(sentence))
            if words & terms or holds_slot(slot, sentence):
                chosen.append((source.number, position, sentence, item))
    if len(chosen) <= limit:
        return chosen
    # Over the cap: keep each source's share in rank order, most question words first within a source.
    ranked = sorted(chosen, key=lambda c: (c[0], -len(set(content_terms(c[2])) & terms), c[1]))
    return sorted(ranked[:limit], key=lambda c: (c[0], c[1]))


def scored_sentences(reader: Reader, question: str, slot: AskedSlot, sources: Sequence[Source]) -> list[ScoredSentence]:
    picked = preselected(question, slot, sources)
    if not picked:
        return []
    probabilities = reader.score(question, [text for _, _, text, _ in picked])
    context = {s.number: f"{s.passage.title}\n{s.passage.heading}" for s in sources}
    # The subject may sit in the section's heading or the document's title rather than the sentence.
    return [ScoredSentence(number, position, text, item, float(p), holds_slot(slot, text),
                           subject_share(slot, f"{context.get(number, '')}\n{text}"))
            for (number, position, text, item), p in zip(picked, probabilities)]
