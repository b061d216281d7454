"""Conflicting versions among the sources (issue 3, item 6): reported, never silently resolved.

Three cases make two sources disagree about which text applies:
- `versions`: two versions of the same document (only possible when passages bypass the live
  check, e.g. a cached response; the check is cheap, so it is kept);
- `supersedes`: one document names the other as superseded, yet both are still readable;
- `effective_dates`: two documents of the same title family (the title without years, dates and
  version words), e.g. "Travel policy 2023" and "Travel policy", with different effective dates —
  or with none, or the same, so that no date says which applies (a run or an answer is then held
  for the owner's review: citadel/tools/reviews.py).
Guessing that the later date wins would be wrong as often as right (a dated policy may be a
draft for next year), so the answer names both and lets the reader decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from citadel import regex
from citadel.catalog.base import DocumentRecord
from citadel.prompting.source import Source

VERSIONS, SUPERSEDES, EFFECTIVE_DATES = "versions", "supersedes", "effective_dates"
# Words and numbers that distinguish editions of one document rather than different documents.
EDITION_WORDS = regex.compile("answer.conflicts.edition_words",
    r"\b(?:(?:19|20)\d\d(?:[-/.]\d{1,2}){0,2}|v(?:ersion)?\s*\d+(?:\.\d+)*|rev(?:ision|ised)?|updated|"
    r"draft|old|new|current|latest|final|edition|amended)\b",
    regex.IGNORECASE,
)
NON_WORD = regex.compile("answer.conflicts.non_word", r"[^a-z0-9]+")


@dataclass(frozen=True)
class Conflict:
    kind: str
    source_numbers: tuple[int, int]
    document_ids: tuple[str, str]
    detail: str

    def note(self) -> str:
        """A sentence for the answer; markers are source numbers (renumbered with the answer)."""
        return f"Conflicting sources: {self.detail}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "document_ids": list(self.document_ids), "detail": self.detail}


def title_family(title: str) -> str:
    """The title without edition markers, lowercased: equal families are editions of one text."""
    return NON_WORD.sub(" ", EDITION_WORDS.sub(" ", title).lower()).strip()


def _label(source: Source) -> str:
    return f"\"{source.passage.title}\" [{source.number}]"


def _pair_conflict(a: Source, b: Source, records: Mapping[str, DocumentRecord | None]) -> Conflict | None:
    pa, pb = a.passage, b.passage
    numbers, ids = (a.number, b.number), (pa.document_id, pb.document_id)
    if pa.document_id == pb.document_id:
        if pa.version == pb.version:
            return None
        return Conflict(VERSIONS, numbers, ids, f"versions {pa.version} {_label(a)} and {pb.version} {_label(b)} "
                        "of the same document differ; check which one applies.")
    ra, rb = records.get(pa.document_id), records.get(pb.document_id)
    if ra is None or rb is None:
        return None
    if ra.supersedes == pb.document_id or rb.supersedes == pa.document_id:
        newer, older = (a, b) if ra.supersedes == pb.document_id else (b, a)
        return Conflict(SUPERSEDES, numbers, ids, f"{_label(newer)} supersedes {_label(older)}, yet both are "
                        "published; check which one applies.")
    same_family = title_family(ra.title or pa.title) == title_family(rb.title or pb.title) != ""
    if not same_family:
        return None
    if ra.effective_date and rb.effective_date and ra.effective_date != rb.effective_date:
        return Conflict(EFFECTIVE_DATES, numbers, ids, f"{_label(a)} is effective {ra.effective_date} and "
                        f"{_label(b)} is effective {rb.effective_date}; check which one applies.")
    # Editions of one text that no date orders: the worst case, not a quiet one (issue 16: a review task).
    undated = [_label(s) for s, r in ((a, ra), (b, rb)) if not r.effective_date]
    why = (f"{' and '.join(undated)} {'has' if len(undated) == 1 else 'have'} no effective date" if undated
           else f"both are effective {ra.effective_date}")
    return Conflict(EFFECTIVE_DATES, numbers, ids, f"{_label(a)} and {_label(b)} are editions of one text and "
                    f"{why}; check which one applies.")


def detect_conflicts(sources: Sequence[Source], records: Mapping[str, DocumentRecord | None]) -> list[Conflict]:
    """Conflicts between any two sources, at most one per pair of documents."""
    conflicts: list[Conflict] = []
    seen_pairs: set[frozenset[str]] = set()
    for i, a in enumerate(sources):
        for b in sources[i + 1:]:
            pair = frozenset((f"{a.passage.document_id}:{a.passage.version}",
                              f"{b.passage.document_id}:{b.passage.version}"))
            if pair in seen_pairs:
                continue
            conflict = _pair_conflict(a, b, records)
            if conflict is not None:
                seen_pairs.add(pair)
                conflicts.append(conflict)
    return conflicts
