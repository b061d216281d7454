"""Text normalisation shared by the guardrail rules.

Attackers hide trigger phrases behind zero-width characters, full-width letters or odd spacing, so
every rule runs over the same normalised, lower-cased text.
"""

from __future__ import annotations

import re
import unicodedata

# Characters that render as nothing but split a phrase for a naive regex.
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff\u00ad]")
_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_CURLY_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def normalise(text: str) -> str:
    """NFKC, no invisible characters, straight quotes, single spaces, lower case (newlines kept)."""
    text = unicodedata.normalize("NFKC", text)
    text = _INVISIBLE.sub("", text).translate(_CURLY_QUOTES)
    return _SPACES.sub(" ", text).lower().strip()


def compile_all(patterns: dict[str, str]) -> dict[str, re.Pattern[str]]:
    """Compile named patterns once, at import time, with the flags every rule uses."""
    return {name: re.compile(pattern, re.IGNORECASE | re.MULTILINE) for name, pattern in patterns.items()}


def first_match(patterns: dict[str, re.Pattern[str]], text: str) -> str | None:
    """The name of the first pattern that matches `text`, or None."""
    for name, pattern in patterns.items():
        if pattern.search(text):
            return name
    return None
