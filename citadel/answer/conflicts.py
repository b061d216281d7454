"""Conflicting versions among the sources: reported, never silently resolved.

Three cases make two sources disagree about which text applies:
- `versions`: two versions of the same document (only possible when passages bypass the live
  check, e.g. a cached response; the check is cheap, so it is kept);
- `supersedes`: one document names the other as superseded, yet both are still readable;
- `effective_dates`: two documents of the same title family (the title without years, dates and
  version words), e.g. "Travel policy 2023" and "Travel policy", with different effective dates —
  or with none, or the same, so that no date says which applies (a run or an answer is then held
  for the owner's review: citadel/reviews/).
Guessing that the later date wins would be wrong as often as right (a dated policy may be a
draft for next year), so the answer names both and lets the reader decide. Only reliable metadata
resolves a conflict (`resolve`, `resolved_conflicts`): one version published and the other not, an
explicit `supersedes`, or two effective dates both readable and one already in force.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from citadel import regex
from citadel.catalog.base import DocumentRecord
from citadel.chunking import count_tokens
from citadel.prompting.source import Source
from citadel.types import Passage

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
    # Editions of one text that no date orders: the worst case, not a quiet one (it goes to a review task).
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


# ---------------------------------------------------------------------- resolution by reliable metadata
# A resolved conflict's detail is at most this long: it is recorded in a run's plan and reflections,
# whose `detail` fields hold this much (citadel/agent/plan.py MAX_DETAIL_CHARS).
MAX_RESOLVED_DETAIL_CHARS = 500
PUBLISHED = "published"


def as_sources(passages: Sequence[Passage]) -> list[Source]:
    """Passages numbered 1..n, for the single-shot path's conflict detection."""
    return [Source(number, p, p.text, count_tokens(p.text)) for number, p in enumerate(passages, start=1)]


def _iso_date(value: str | None) -> datetime.date | None:
    try:
        return datetime.date.fromisoformat(value[:10]) if value else None
    except ValueError:
        return None


def resolve(conflict: Conflict, records: Mapping[str, DocumentRecord | None], today: str = "") -> str | None:
    """The document that applies, by reliable metadata only; None when they cannot decide."""
    first, second = conflict.document_ids
    a, b = records.get(first), records.get(second)
    if a is None or b is None or first == second:
        return None
    if (a.status == PUBLISHED) != (b.status == PUBLISHED):
        return first if a.status == PUBLISHED else second
    if conflict.kind == SUPERSEDES:
        return first if a.supersedes == second else second
    if conflict.kind == EFFECTIVE_DATES:
        return _in_force(first, a, second, b, _iso_date(today) or datetime.date.today())
    return None


def _in_force(first: str, a: DocumentRecord, second: str, b: DocumentRecord, today: datetime.date) -> str | None:
    """The later effective date among those already in force; None without two readable dates."""
    dated = [(date, doc) for date, doc in ((_iso_date(a.effective_date), first), (_iso_date(b.effective_date), second))
             if date is not None]
    if len(dated) < 2:
        return None
    in_force = [(date, doc) for date, doc in dated if date <= today]
    return max(in_force)[1] if in_force else None


def resolved_conflicts(passages: Sequence[Passage], records: Mapping[str, DocumentRecord | None],
                       today: str = "") -> list[dict[str, Any]]:
    """Conflicts among the passages, then with the predecessors their documents supersede (when
    `records` holds them), each with the document that applies (`resolved_to`, or None)."""
    found = detect_conflicts(as_sources(passages), records)
    seen = {frozenset(c.document_ids) for c in found}
    for document_id in dict.fromkeys(p.document_id for p in passages):
        record = records.get(document_id)
        older = records.get(record.supersedes) if record is not None and record.supersedes else None
        if older is not None and frozenset((document_id, older.document_id)) not in seen:
            seen.add(frozenset((document_id, older.document_id)))
            found.append(Conflict(SUPERSEDES, (0, 0), (document_id, older.document_id),
                                  f'"{record.title}"{_since(record)} supersedes "{older.title}"{_since(older)}.'))
    return [{"kind": c.kind, "document_ids": list(c.document_ids), "detail": _plain_detail(c),
             "resolved_to": resolve(c, records, today)} for c in found]


def predecessor_ids(records: Mapping[str, DocumentRecord | None]) -> set[str]:
    """The documents the records name in `supersedes` that are not among them."""
    return {r.supersedes for r in records.values() if r is not None and r.supersedes and r.supersedes not in records}


def _since(record: DocumentRecord) -> str:
    return f" (effective {record.effective_date})" if record.effective_date else ""


def _plain_detail(conflict: Conflict) -> str:
    """The conflict's sentence with its [n] markers (numbers of this evidence list) left out."""
    detail = conflict.detail
    for number in conflict.source_numbers:
        detail = detail.replace(f" [{number}]", "")
    return detail[:MAX_RESOLVED_DETAIL_CHARS]


def resolution_note(conflict: Mapping[str, Any], records: Mapping[str, DocumentRecord | None]) -> str:
    """A sentence for the answer naming the version that applies and why ("" when unresolved)."""
    winner = conflict.get("resolved_to")
    losers = [d for d in conflict.get("document_ids", ()) if d != winner]
    won = records.get(winner) if winner else None
    lost = records.get(losers[0]) if losers else None
    if won is None or lost is None:
        return ""
    if conflict.get("kind") == SUPERSEDES and won.supersedes == lost.document_id:
        why = "it supersedes the other" + (f", in force since {won.effective_date}" if won.effective_date else "")
    elif won.status != lost.status:
        why = f"it is {won.status}, the other is {lost.status}"
    else:
        why = f"it is in force since {won.effective_date}, the other since {lost.effective_date}"
    return f'Resolved: "{won.title}" applies over "{lost.title}" ({why}).'


def superseded_documents(conflicts: Iterable[Mapping[str, Any]]) -> set[str]:
    """Documents a resolved conflict ruled out: their passages do not answer."""
    losers: set[str] = set()
    for conflict in conflicts:
        winner = conflict.get("resolved_to")
        if winner:
            losers.update(d for d in conflict.get("document_ids", ()) if d != winner)
    return losers
