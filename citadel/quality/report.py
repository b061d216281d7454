"""The weekly quality report (`citadel quality report`, DESIGN.md §11): the worst topics by the signals
without labels, from what the catalog stores — the answer log and the feedback rows.

A **topic** is the section an answer cites first (document and heading), else the document of its
closest retrieved passage (a refusal or a not-confirmed reply that cited nothing), else "(nothing
found)". That is what every stored row supports: the router classifies requests (off-topic, a person,
several needs), not subjects, so it stores no topic; every answer row names its citations with their
headings and the passages it weighed.

Per topic, over the answers logged in the period:
- **rephrased**: answers whose question the same user asked again in other words within the window
  (a later row's `rephrase_of` names them: the answer that did not help, not the rephrase);
- **thumbs-down**: answers voted down, with the reasons given;
- **verifier**: claims kept of the claims checked (removed or corrected claims failed);
- **low best score**: answers whose best score (citadel/quality/signals.py) is under the threshold.

An answer with any of the four is *flagged*; topics are listed by flagged answers, then by their share.
No question text leaves the report: topics are document ids and headings.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from citadel.quality.signals import REPHRASE_OF, best_score, verdict_counts
from citadel.quality.verifier import KEPT

NOTHING_FOUND = "(nothing found)"
DOWN = "down"


@dataclass
class TopicSignals:
    tenant: str
    topic: str
    answers: int = 0
    flagged: int = 0
    rephrased: int = 0
    thumbs_down: int = 0
    votes: int = 0
    down_reasons: Counter = field(default_factory=Counter)
    claims: int = 0
    claims_kept: int = 0
    scored: int = 0
    low_best_score: int = 0

    @property
    def verifier_pass_rate(self) -> float | None:
        return self.claims_kept / self.claims if self.claims else None

    def to_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "topic": self.topic, "answers": self.answers, "flagged": self.flagged,
                "rephrased": self.rephrased, "thumbs_down": self.thumbs_down, "votes": self.votes,
                "down_reasons": dict(sorted(self.down_reasons.items())), "claims": self.claims,
                "claims_kept": self.claims_kept, "verifier_pass_rate": _rounded(self.verifier_pass_rate),
                "scored": self.scored, "low_best_score": self.low_best_score}


@dataclass
class QualityReport:
    days: float
    since: float
    low_best_score: float
    topics: list[TopicSignals]  # worst first
    rows_read: int = 0
    truncated: list[str] = field(default_factory=list)  # tenants whose rows hit the read limit

    def totals(self) -> dict[str, Any]:
        def total(name: str) -> int:
            return sum(getattr(t, name) for t in self.topics)

        answers, votes, claims, scored = total("answers"), total("votes"), total("claims"), total("scored")
        return {"answers": answers, "flagged": total("flagged"), "rephrased": total("rephrased"),
                "rephrase_share": _share(total("rephrased"), answers), "votes": votes,
                "thumbs_down": total("thumbs_down"), "thumbs_down_share": _share(total("thumbs_down"), votes),
                "claims": claims, "verifier_pass_rate": _share(total("claims_kept"), claims), "scored": scored,
                "low_best_score": total("low_best_score"), "low_best_score_share": _share(total("low_best_score"),
                                                                                          scored)}

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        return {"days": self.days, "since": self.since, "low_best_score_threshold": self.low_best_score,
                "rows_read": self.rows_read, "truncated_tenants": self.truncated, "totals": self.totals(),
                "topics": [t.to_dict() for t in self.topics[:top]]}


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def topic_of(entry: dict[str, Any]) -> str:
    """The section an answer cites first, else its closest passage's document, else NOTHING_FOUND."""
    for citation in entry.get("citations") or ():
        document = citation.get("document_id")
        if document:
            heading = citation.get("heading")
            return f"{document} › {heading}" if heading else str(document)
    for passage in entry.get("passages") or ():
        if passage.get("document_id"):
            return str(passage["document_id"])
    return NOTHING_FOUND


def build_report(rows: Iterable[dict[str, Any]], feedback: Iterable[dict[str, Any]], low_best_score: float,
                 days: float, since: float) -> QualityReport:
    """`rows`: answer-log rows (request_id, tenant_id, response, …) logged since `since`; `feedback`:
    the feedback rows of the same tenants (those before `since`, or on answers outside the rows, are
    left out)."""
    answers: dict[tuple[str, str], dict[str, Any]] = {}
    read = 0
    for row in rows:
        read += 1
        answers[(row["tenant_id"], row["request_id"])] = row  # a request id logged twice: its newest row
    topics: dict[tuple[str, str], TopicSignals] = {}
    flagged: set[tuple[str, str]] = set()

    def topic_for(key: tuple[str, str]) -> TopicSignals:
        topic = topic_of(answers[key]["response"])
        return topics.setdefault((key[0], topic), TopicSignals(key[0], topic))

    for key, row in answers.items():
        entry, signals = row["response"], topic_for(key)
        signals.answers += 1
        verdicts = verdict_counts(entry)
        signals.claims += sum(verdicts.values())
        signals.claims_kept += verdicts.get(KEPT, 0)
        score = best_score(entry)
        if score is not None:
            signals.scored += 1
            signals.low_best_score += score < low_best_score
        if (score is not None and score < low_best_score) or sum(verdicts.values()) > verdicts.get(KEPT, 0):
            flagged.add(key)
        rephrased = (key[0], entry.get(REPHRASE_OF))
        if rephrased[1] and rephrased in answers:
            topic_for(rephrased).rephrased += 1
            flagged.add(rephrased)
    for vote in feedback:
        key = (vote["tenant_id"], vote["answer_id"])
        if vote.get("ts", 0.0) < since or key not in answers:
            continue
        signals = topic_for(key)
        signals.votes += 1
        if vote["vote"] == DOWN:
            signals.thumbs_down += 1
            signals.down_reasons[vote.get("reason") or "none"] += 1
            flagged.add(key)
    for key in flagged:
        topic_for(key).flagged += 1
    worst = sorted(topics.values(), key=lambda t: (-t.flagged, -(t.flagged / t.answers if t.answers else 0.0),
                                                   -t.answers, t.tenant, t.topic))
    return QualityReport(days, since, low_best_score, worst, read)


def to_markdown(report: QualityReport, top: int) -> str:
    """The report as a markdown table, worst topics first, with the period's totals above it."""
    totals = report.totals()
    lines = [f"# Quality report: the last {report.days:g} days",
             "",
             f"{totals['answers']} answers, {totals['flagged']} flagged; rephrased "
             f"{_percent(totals['rephrase_share'])}, "
             f"thumbs-down {_percent(totals['thumbs_down_share'])} of {totals['votes']} votes, verifier pass rate "
             f"{_percent(totals['verifier_pass_rate'])} of {totals['claims']} claims, low best score (< "
             f"{report.low_best_score:g}) {_percent(totals['low_best_score_share'])} of {totals['scored']} scored.",
             ""]
    if report.truncated:
        lines += [f"Only the newest {report.rows_read} rows were read (the read limit was reached for "
                  f"{', '.join(report.truncated)}).", ""]
    if not report.topics:
        return "\n".join([*lines, "No answers were logged in the period."]) + "\n"
    lines += ["| Tenant | Topic | Answers | Flagged | Rephrased | Thumbs-down (reasons) | Verifier pass | "
              "Low best score |",
              "|---|---|---:|---:|---:|---|---:|---:|"]
    for t in report.topics[:top]:
        reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(t.down_reasons.items()))
        down = (f"{t.thumbs_down} of {t.votes}" + (f" ({reasons})" if reasons else "")) if t.votes else "–"
        passed = f"{_percent(t.verifier_pass_rate)} of {t.claims}" if t.claims else "–"
        low = f"{t.low_best_score} of {t.scored}" if t.scored else "–"
        lines.append(f"| {t.tenant} | {_cell(t.topic)} | {t.answers} | {t.flagged} | {t.rephrased} | {down} | "
                     f"{passed} | {low} |")
    return "\n".join(lines) + "\n"


def _percent(share: float | None) -> str:
    return "–" if share is None else f"{share:.0%}"


def _cell(text: str) -> str:
    """A table cell: a heading's pipes and line breaks would break the row."""
    return " ".join(text.replace("|", "\\|").split())


def report_from_catalog(catalog, tenants: Iterable[str], days: float, low_best_score: float, max_rows: int,
                        now: float) -> QualityReport:
    """The report over `tenants`' answer log and feedback of the last `days` days, reading at most
    `max_rows` answer-log rows per tenant (the newest; a tenant that hits the limit is named)."""
    since = now - days * 86_400.0
    rows: list[dict[str, Any]] = []
    feedback: list[dict[str, Any]] = []
    truncated: list[str] = []
    for tenant in tenants:
        logged = catalog.answer_log(tenant, limit=max_rows, since=since)
        if len(logged) >= max_rows:
            truncated.append(tenant)
        rows.extend(logged)
        feedback.extend(catalog.feedback(tenant))
    report = build_report(rows, feedback, low_best_score, days, since)
    report.truncated = truncated
    return report
