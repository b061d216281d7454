"""Term and sentence helpers shared by the gate, the extractive generator and the validator.

All three must agree on what a "term" is, or the gate would pass a question the generator cannot
quote and the validator would reject sentences the generator copied verbatim. Terms are lowercase
words, stopwords removed, reduced by a small suffix stripper so "approve", "approved" and "approval"
meet; the stripper only has to be consistent, not linguistically right.
"""

from __future__ import annotations

import re

WORD = re.compile(r"[a-z0-9]+")
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

# After ., ! or ? (optionally closed by a quote or bracket) and whitespace.
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'”’)\]])\s+")
PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# A line that starts its own piece even without a blank line before it: list items, headings,
# table rows. Any other line break inside a paragraph is a hard wrap and reads as a space.
OWN_LINE = re.compile(r"^\s*(?:[-*+•]|\d+[.)]|#+|\|)\s*")
MARKDOWN_HEADING = re.compile(r"^#{1,6}\s")
LIST_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)]|#+)\s+")
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


def content_terms(text: str) -> list[str]:
    """Stemmed, stopword-free terms of `text`, in order (with repeats)."""
    return [stem(w) for w in WORD.findall(text.lower()) if w not in STOPWORDS]


def term_set(text: str) -> set[str]:
    return set(content_terms(text))


def unwrap_lines(paragraph: str) -> list[str]:
    """Lines of a paragraph with hard wraps joined; list items, headings and table rows kept apart."""
    pieces: list[str] = []
    for line in paragraph.splitlines():
        if pieces and line.strip() and not OWN_LINE.match(line):
            pieces[-1] = f"{pieces[-1]} {line.strip()}"
        elif line.strip():
            pieces.append(line.strip())
    return pieces


def sentence_pieces(text: str) -> list[tuple[str, bool]]:
    """(sentence, whether it is a list item) for each sentence of `text`, bullets and heading marks
    removed, fragments dropped."""
    pieces = []
    for paragraph in PARAGRAPH_BREAK.split(text):
        for line in unwrap_lines(paragraph):
            if MARKDOWN_HEADING.match(line):
                continue  # a heading labels the text, it is not a statement to quote
            list_item = bool(LIST_BULLET.match(line))
            for piece in SENTENCE_BREAK.split(line):
                piece = LIST_BULLET.sub("", piece.strip()).strip()
                if len(piece.split()) >= MIN_SENTENCE_WORDS:
                    pieces.append((piece, list_item))
    return pieces


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`, list bullets and heading marks removed, fragments dropped."""
    return [sentence for sentence, _ in sentence_pieces(text)]
