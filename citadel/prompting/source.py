"""A numbered source: the unit a generator cites with [n]."""

from __future__ import annotations

from dataclasses import dataclass

from citadel.types import Passage


@dataclass(frozen=True)
class Source:
    """One numbered source handed to the generator: the hit passage and its expanded section."""

    number: int
    passage: Passage
    text: str
    tokens: int

    def citation(self) -> dict:
        p = self.passage
        return {"chunk_id": p.chunk_id, "document_id": p.document_id, "title": p.title,
                "version": p.version, "heading": p.heading, "page": p.page, "source": p.source}
