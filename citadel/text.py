"""Term and sentence helpers shared by every room that reads text: the gate, the extractive generator
and the validator (citadel/answer/), the reader's fake and training (citadel/reader/), the agent's
evidence and the claim verifier.

The answer's three must agree on what a "term" is, or the gate would pass a question the generator
cannot quote and the validator would reject sentences the generator copied verbatim. Terms are lowercase
words, stopwords removed, reduced by a small suffix stripper so "approve", "approved" and "approval"
meet; the stripper only has to be consistent, not linguistically right.
"""

from __future__ import annotations

import functools
from pathlib import PurePath
from typing import Callable

from citadel import regex

WORD = regex.compile("text.word", r"[a-z0-9]+")
# Shortest stem a suffix may leave: shorter stems conflate unrelated words ("us" from "user").
MIN_STEM = 3
# (suffix, replacement), longest first; the first rule that leaves a long-enough stem wins.
SUFFIX_RULES: tuple[tuple[str, str], ...] = (
    ("ational", "ate"), ("ations", ""), ("ation", ""), ("iveness", "ive"), ("ments", ""), ("ment", ""),
    ("ingly", ""), ("ings", ""), ("ing", ""), ("ies", "y"), ("ied", "y"), ("edly", ""), ("ers", ""),
    ("er", ""), ("ed", ""), ("als", ""), ("al", ""), ("ly", ""), ("es", ""), ("s", ""),
)
# Endings where a final "s" is part of the word, not a plural.
KEEP_FINAL_S = ("ss", "us", "is")

# Function words and question scaffolding (including generic verbs such as "give" or "know"):
# they say nothing about which passage answers.
STOPWORDS = frozenset("""
a about above after again against all also am an and any are aren as at be because been before being
many much
below between both but by can cannot could couldn did didn do does doesn doing don down during each
either else etc ever every few for from further get gets got had hadn has hasn have haven having he her
here hers herself him himself his how however i if in into is isn it its itself just let lets like
may me might more most must mustn my myself need needs no nor not now of off on once only or other
ought our ours ourselves out over own per please same shall shan she should shouldn so some such
tell than that the their theirs them themselves then there these they this those through to too
under until up upon us very via was wasn we were weren what whatever when where whether which while
who whom whose why will with within without won would wouldn yes yet you your yours yourself
yourselves s t d ll m re ve
give gives given get gets getting go goes going know want wants tell find say says see take happen
happens mean means
""".split())

# Period shorthand of financial and planning text, matched against one whole lowercase word:
# "fy", "fy22", "fy2022", "q2", "2q", "4q23", "q4fy23", "2024q2". Filings write "fiscal 2022" and "second
# quarter", so the shorthand of a question is spelled out before terms are compared (on both sides:
# a title like "4Q 2023" meets a question about the "fourth quarter").
# A year before the quarter only as "2024q2", after it only as "4q23" (with no "fy"): RE2 has no
# look-around, so `period_shorthand` checks the second rule in code.
PERIOD_SHORTHAND = regex.compile(
    "text.period_shorthand",
    r"(?:(?P<year_before>\d{4})?q(?P<q>[1-4])|(?P<q_before>[1-4])q)?"
    r"(?:(?P<fy>fy)(?P<fy_year>\d{4}|\d{2})?)?"
    r"(?P<year_after>\d{2}|\d{4})?"
)


def period_shorthand(word: str):
    """The match of `word` as period shorthand, or None (a trailing year needs a "q" just before)."""
    match = PERIOD_SHORTHAND.fullmatch(word)
    if match is None or (match.group("year_after") and (match.group("q_before") is None or match.group("fy"))):
        return None
    return match


QUARTER_ORDINALS = ("first", "second", "third", "fourth")
PERCENT = "percent"
PERCENT_WORDS = frozenset({"percentage", "percentages", "pct"})
PERCENT_SIGN = regex.compile("text.percent_sign", r"%")
# A whole run of letters and digits (a greedy run is maximal, so no look-around is needed).
SHORTHAND_CANDIDATE = regex.compile("text.shorthand_candidate", r"[a-z0-9]+", regex.IGNORECASE)

# File names that say nothing about the document ("docs/leave/index.md").
GENERIC_FILE_STEMS = frozenset({"index", "readme", "_index", "default", "main", "document", "untitled"})
# Shortest part of a closed compound split against the corpus vocabulary ("cash"+"flow").
MIN_COMPOUND_PART = 3

# After ., ! or ? (optionally closed by a quote or bracket) and whitespace.
# Whitespace after ".", "!" or "?" (and one closing quote or bracket): the cut is the whitespace.
SENTENCE_BREAK = regex.compile("text.sentence_break", r"[.!?][\"'”’)\]]?(?P<cut>\s+)")
PARAGRAPH_BREAK = regex.compile("text.paragraph_break", r"\n\s*\n")
# A line that starts its own piece even without a blank line before it: list items, headings,
# table rows. Any other line break inside a paragraph is a hard wrap and reads as a space.
# Bullets include those PDF text extraction produces ("·", "▪", "◦", the private-use "\uf0b7").
BULLETS = r"\-*+•·▪◦‣\uf0b7"
OWN_LINE = regex.compile("text.own_line", rf"^\s*(?:[{BULLETS}]|\d+[.)]|#+|\|)\s*")
MARKDOWN_HEADING = regex.compile("text.markdown_heading", r"^#{1,6}\s")
LIST_BULLET = regex.compile("text.list_bullet", rf"^\s*(?:[{BULLETS}]|\d+[.)]|#+)\s+")
# A row of a table extracted from a PDF: a label and figure cells, no separators ("Operating
# income  6,098  5,802  4,237"). Figure-like tokens: amounts, percentages, bracketed negatives,
# dashes for nil, lone currency or percent signs.
FIGURE_CELL = regex.compile(
    "text.figure_cell", r"^[(\[]?[$€£]?\(?[-+]?\d[\d,]*(?:\.\d+)?\)?%?[)\]]?,?$|^[$€£%—–-]$"
)
MIN_ROW_FIGURES = 2
MIN_ROW_FIGURE_SHARE = 0.4
# A table is at least this many rows; its caption and header lines have at most this many words.
MIN_TABLE_ROWS = 2
MAX_LABEL_WORDS = 40
# A line ending with this introduces what follows (a list, a table): the next line is not a wrap.
INTRO_END = ":"
# A piece shorter than this many words is a heading or a fragment, not a quotable sentence.
MIN_SENTENCE_WORDS = 3


def stem(word: str) -> str:
    """Strip one common suffix, then a trailing "e", keeping at least MIN_STEM characters."""
    if len(word) <= MIN_STEM or word.isdigit():
        return word
    for suffix, replacement in SUFFIX_RULES:
        if not word.endswith(suffix) or len(word) - len(suffix) < MIN_STEM:
            continue
        if suffix == "s" and word.endswith(KEEP_FINAL_S):
            break
        word = word[: len(word) - len(suffix)] + replacement
        break
    if word.endswith("e") and len(word) > MIN_STEM + 1:
        word = word[:-1]
    return word


def two_digit_year(digits: str) -> str:
    """A year as four digits; two digits pivot like POSIX `%y` (00-68 → 20xx, 69-99 → 19xx)."""
    if len(digits) != 2:
        return digits
    return ("20" if int(digits) <= 68 else "19") + digits


def spell_out(word: str) -> list[str]:
    """The words a period shorthand stands for, as reports write them out: "fy2022" → fiscal 2022,
    "fy22" → fiscal 2022, "q2" and "2q" → second quarter, "2024q2" → 2024 second quarter,
    "percentage" → percent. Any other word is returned alone."""
    match = period_shorthand(word)
    if match is None:
        return [PERCENT] if word in PERCENT_WORDS else [word]
    year = match.group("fy_year") or match.group("year_before") or match.group("year_after")
    quarter = match.group("q") or match.group("q_before")
    words = ["fiscal"] if match.group("fy") else []
    if quarter:
        words += [QUARTER_ORDINALS[int(quarter) - 1], "quarter"]
    if year:
        words.append(two_digit_year(year))
    return words


def spell_out_shorthand(text: str) -> str:
    """`text` with each period shorthand word spelled out ("Q2 of FY2024" → "second quarter of
    fiscal 2024"), everything else as it was: the search query, so both retrieval legs meet the
    words the documents use."""
    def spelled(match: object) -> str:
        word = match.group(0)
        return " ".join(spell_out(word.lower())) if period_shorthand(word.lower()) else word

    return SHORTHAND_CANDIDATE.sub(spelled, text)


def split_compound(word: str, known: Callable[[str], bool]) -> tuple[str, str] | None:
    """`word` as two words when it is a closed compound of words the corpus knows and the corpus
    does not know it whole ("cashflow" → cash flow, "passthrough" → pass through), else None.

    `known(term)` says whether a (stemmed) term occurs in the corpus. Each part has at least
    MIN_COMPOUND_PART letters and is a known term or a stopword, at least one part is known, and
    the most even split wins.
    """
    if not word.isalpha() or len(word) < 2 * MIN_COMPOUND_PART or word in STOPWORDS or known(stem(word)):
        return None
    best: tuple[str, str] | None = None
    for cut in range(MIN_COMPOUND_PART, len(word) - MIN_COMPOUND_PART + 1):
        left, right = word[:cut], word[cut:]
        parts_known = [known(stem(part)) for part in (left, right)]
        if not any(parts_known):
            continue
        if all(ok or part in STOPWORDS for ok, part in zip(parts_known, (left, right))):
            if best is None or min(len(left), len(right)) > min(len(best[0]), len(best[1])):
                best = (left, right)
    return best


def decompound(text: str, known: Callable[[str], bool]) -> str:
    """`text` with every closed compound the corpus only knows as two words split (see
    `split_compound`); everything else as it was."""
    def split(match: object) -> str:
        parts = split_compound(match.group(0).lower(), known)
        return match.group(0) if parts is None else " ".join(parts)

    return SHORTHAND_CANDIDATE.sub(split, text)


def document_name(title: str, source: str) -> str:
    """What names a document: its title and its file name ("ADBE 10-K FY22" from "ADOBE_2022_10K.pdf").
    Every passage of the document is about what its name says, though few of its pages repeat it:
    a statement table of a 10-K never says whose it is."""
    stem = PurePath(source or "").stem
    return f"{title}\n{stem}" if stem and stem.lower() not in GENERIC_FILE_STEMS else title


def words_of(text: str) -> list[str]:
    """Lowercase words of `text`, "%" read as "percent" and period shorthand spelled out."""
    return [w for raw in WORD.findall(PERCENT_SIGN.sub(f" {PERCENT} ", text.lower())) for w in spell_out(raw)]


def content_terms(text: str) -> list[str]:
    """Stemmed, stopword-free terms of `text`, in order (with repeats)."""
    return list(_content_terms(text))


def term_set(text: str) -> set[str]:
    return set(_content_terms(text))


# The same passages come back for question after question (a tenant's popular sections), and each
# answer reads their terms several times (gate, reader, evidence, validator): remembered, they cost
# one analysis per passage instead of several per request. Long texts are analysed afresh, so the
# cache holds at most TERMS_CACHE_ENTRIES texts of at most TERMS_CACHE_MAX_CHARS each.
TERMS_CACHE_ENTRIES = 4096
TERMS_CACHE_MAX_CHARS = 8192


def _content_terms(text: str) -> tuple[str, ...]:
    if len(text) > TERMS_CACHE_MAX_CHARS:
        return _analysed(text)
    return _remembered_terms(text)


def _analysed(text: str) -> tuple[str, ...]:
    return tuple(stem(w) for w in words_of(text) if w not in STOPWORDS)


_remembered_terms = functools.lru_cache(maxsize=TERMS_CACHE_ENTRIES)(_analysed)


def is_table_row(line: str) -> bool:
    """A line that is mostly figure cells (at least MIN_ROW_FIGURES of them, and at least
    MIN_ROW_FIGURE_SHARE of its tokens): a row of a table that lost its grid in text extraction."""
    tokens = line.split()
    cells = [t for t in tokens if FIGURE_CELL.match(t)]
    figures = sum(any(c.isdigit() for c in t) for t in cells)
    return figures >= MIN_ROW_FIGURES and len(cells) >= MIN_ROW_FIGURE_SHARE * len(tokens)


def unwrap_lines(paragraph: str) -> list[str]:
    """Lines of a paragraph with hard wraps joined; list items, headings and table rows kept apart.
    A line ending with ":" ends its piece (what follows is a list or a table, not a continuation)."""
    pieces: list[str] = []
    previous_row = False
    for line in paragraph.splitlines():
        if not line.strip():
            continue
        row = is_table_row(line)
        joins = (pieces and not OWN_LINE.match(line) and not row and not previous_row
                 and not pieces[-1].endswith(INTRO_END))
        if joins:
            pieces[-1] = f"{pieces[-1]} {line.strip()}"
        else:
            pieces.append(line.strip())
        previous_row = row
    return pieces


def is_table_label(text: str) -> bool:
    """A caption, column header or row label of a table: short and not a sentence (check
    `is_table_row` first)."""
    stripped = text.strip().rstrip("\"'”’)]")
    return not stripped.endswith((".", "!", "?")) and len(text.split()) <= MAX_LABEL_WORDS


def group_tables(units: list[tuple[str, bool]]) -> list[tuple[str, bool, bool]]:
    """(piece, whether it is a list item, whether it is a table) for (text, list item) units: a run
    of at least MIN_TABLE_ROWS table rows, with the caption and header units before and between
    them, becomes ONE piece. A row alone ("Operating income 6,098 5,802") says nothing without its
    caption ("CONSOLIDATED STATEMENTS OF INCOME") and column headers ("Years Ended December 2,
    2022"), and the answer is the table. A sentence or a list item ends a table, and so does a
    caption ending with ":" after rows: it introduces the next table."""
    rows = [not item and is_table_row(text) for text, item in units]
    in_table = [row or (not item and is_table_label(text)) for (text, item), row in zip(units, rows)]
    pieces: list[tuple[str, bool, bool]] = []
    start = 0
    while start < len(units):
        end = start
        while end < len(units) and in_table[end]:
            if any(rows[start:end]) and units[end][0].rstrip().endswith(INTRO_END):
                break
            end += 1
        if sum(rows[start:end]) >= MIN_TABLE_ROWS:
            pieces.append((" ".join(text for text, _ in units[start:end]), False, True))
            start = end
        else:
            pieces.append((*units[start], False))
            start += 1
    return pieces


def sentence_pieces(text: str) -> list[tuple[str, bool]]:
    """(sentence, whether it is a list item) for each sentence of `text`, bullets and heading marks
    removed, fragments dropped. A table (see `group_tables`) is one piece."""
    units: list[tuple[str, bool]] = []
    for paragraph in PARAGRAPH_BREAK.split(text):
        for line in unwrap_lines(paragraph):
            if MARKDOWN_HEADING.match(line):
                continue  # a heading labels the text, it is not a statement to quote
            list_item = bool(LIST_BULLET.match(line))
            if is_table_row(line) and not list_item:
                units.append((line, False))
                continue
            for piece in SENTENCE_BREAK.split_at(line, "cut"):
                piece = LIST_BULLET.sub("", piece.strip()).strip()
                if piece:
                    units.append((piece, list_item))
    return [(piece, item) for piece, item, table in group_tables(units)
            if table or len(piece.split()) >= MIN_SENTENCE_WORDS]


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`, list bullets and heading marks removed, fragments dropped."""
    return [sentence for sentence, _ in sentence_pieces(text)]
