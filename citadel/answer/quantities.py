"""Dates, durations and figures as a text states them: read ("15 January 2023", "January 15, 2023",
"2023-01-15", the date a sentence says something started), reckoned (whole months between two days, a
day some months on, a comparison of two figures) and spelled back the way the text writes them.

Below both the decision (citadel/agent/decision.py), which computes with them, and the claim verifier
(citadel/quality/verifier.py), which recomputes what an answer states with them.
"""

from __future__ import annotations

from datetime import date

from citadel import regex
from citadel.text import sentence_pieces

NUMBER = r"\d[\d,]*(?:\.\d+)?"
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_MONTH_NAME = r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|" \
              r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
DAY_MONTH_YEAR = regex.compile("answer.quantities.day_month_year",
                               rf"\b(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<m>{_MONTH_NAME})\.?,?\s+(?P<y>\d{{4}})\b",
                               regex.IGNORECASE)
MONTH_DAY_YEAR = regex.compile("answer.quantities.month_day_year",
                               rf"\b(?P<m>{_MONTH_NAME})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<y>\d{{4}})\b",
                               regex.IGNORECASE)
ISO_DATE = regex.compile("answer.quantities.iso_date", r"\b(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})\b")
# A sentence stating when something began: its date is a start date.
START_CUE = regex.compile("answer.quantities.start_cue",
                          r"\b(?:start(?:s|ed|ing)?|since|began|begins?|commenc\w*|effective|signed|joined|"
                          r"opened|onboarded|inception)\b", regex.IGNORECASE)


def parse_dates(text: str) -> list[tuple[int, date]]:
    """(position, date) of each full date in `text` ("15 January 2023", "January 15, 2023", "2023-01-15")."""
    found: list[tuple[int, date]] = []
    for pattern in (DAY_MONTH_YEAR, MONTH_DAY_YEAR, ISO_DATE):
        for match in pattern.finditer(text):
            month = match.group("m")
            number = int(month) if month.isdigit() else _month_number(month)
            try:
                found.append((match.start(), date(int(match.group("y")), number, int(match.group("d")))))
            except ValueError:  # "31 February": not a date
                continue
    return sorted(found, key=lambda item: item[0])


def _month_number(name: str) -> int:
    prefix = name.lower()[:3]
    return next(i for i, month in enumerate(_MONTHS, start=1) if month.startswith(prefix))


def start_date(text: str) -> date | None:
    """The date of the first sentence of `text` that says something started then."""
    for sentence, _ in sentence_pieces(text):
        if START_CUE.search(sentence):
            dates = parse_dates(sentence)
            if dates:
                return dates[0][1]
    return None


def months_between(start: date, end: date) -> int:
    """Whole months from `start` to `end` (a month counts once its day is reached)."""
    return (end.year - start.year) * 12 + (end.month - start.month) - (1 if end.day < start.day else 0)


def add_months(start: date, months: int) -> date:
    """The day `months` whole months after `start` (before it, when negative): the inverse of
    `months_between`; a day the month lacks is its last day (31 January + 1 month = 28 February)."""
    index = start.year * 12 + start.month - 1 + months
    year, month = divmod(index, 12)
    following = date(year + (month + 1) // 12, (month + 1) % 12 + 1, 1)
    return date(year, month + 1, min(start.day, (following - date(year, month + 1, 1)).days))


def spell_date(day: date) -> str:
    """"15 January 2023": how the decision and the verifier write a date."""
    return f"{day.day} {_MONTHS[day.month - 1].title()} {day.year}"


def spell_duration(months: int) -> str:
    years, rest = divmod(months, 12)
    parts = [f"{years} year{'s' if years != 1 else ''}"] if years else []
    if rest or not parts:
        parts.append(f"{rest} month{'s' if rest != 1 else ''}")
    return " ".join(parts)


def parse_figure(token: str) -> float | None:
    """A figure as text writes it ("$740,000", "12%", "1.5") as a number; None when it is not one."""
    try:
        return float(token.strip("$€£%").replace(",", ""))
    except ValueError:
        return None


def spell_figure(value: float, like: str) -> str:
    """`value` written the way `like` writes a figure (currency sign, grouping, decimals)."""
    prefix = like[0] if like[:1] in "$€£" else ""
    decimals = len(like.split(".", 1)[1]) if "." in like else 0
    grouped = "," in like or abs(value) >= 10_000
    body = f"{value:,.{decimals}f}" if grouped else f"{value:.{decimals}f}"
    return prefix + body


def comparison_holds(left: float, op: str, right: float) -> bool:
    op = op.lower()
    if op in ("≥", ">=", "is at least", "meets"):
        return left >= right
    if op in ("≤", "<=", "is at most"):
        return left <= right
    if op in (">", "exceeds", "is above", "is over") or op.startswith(("is more", "is greater", "is higher",
                                                                           "is larger")):
        return left > right
    return left < right  # "<", "is below", "is under", "is less/lower/smaller/fewer than"
