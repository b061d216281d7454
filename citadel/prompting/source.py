"""A numbered source: the unit a generator cites with [n]."""

from __future__ import annotations

from dataclasses import dataclass

from citadel.types import Passage, section_url


@dataclass(frozen=True)
class Source:
    """One numbered source handed to the generator: the hit passage and its expanded section."""

    number: int
    passage: Passage
    text: str
    tokens: int

    def citation(self, quote: str | None = None) -> dict:
        """Where the source is from, the catalog's governance of its version, and the deployment's URL
        that opens it (`quote`: the sentence of it the answer quoted, which that URL marks)."""
        p = self.passage
        return {"chunk_id": p.chunk_id, "document_id": p.document_id, "title": p.title,
                "version": p.version, "heading": p.heading, "page": p.page, "source": p.source,
                **p.governance.to_dict(), "url": section_url(p.document_id, p.version, p.chunk_id, quote)}
