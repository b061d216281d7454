"""Text normalisation shared by the guardrail rules.

Attackers hide trigger phrases behind zero-width characters, full-width letters or odd spacing, so
every rule runs over the same normalised, lower-cased text.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass

# Characters that render as nothing but split a phrase for a naive regex.
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff\u00ad]")
_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_CURLY_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def normalise(text: str) -> str:
    """HTML entities decoded, NFKC, no invisible characters, straight quotes, single spaces, lower
    case (newlines kept)."""
    text = unicodedata.normalize("NFKC", html.unescape(text))
    text = _INVISIBLE.sub("", text).translate(_CURLY_QUOTES)
    return _SPACES.sub(" ", text).lower().strip()


@dataclass(frozen=True)
class Rule:
    """A compiled pattern, with literal substrings at least one of which any match must contain.

    Checking the needles with `in` costs microseconds, so most texts skip the regex entirely: this
    keeps a scan of every retrieved passage (or 15k handbook paragraphs) fast.
    """

    pattern: re.Pattern[str]
    needles: tuple[str, ...] = ()

    def search(self, text: str) -> re.Match[str] | None:
        if self.needles and not any(needle in text for needle in self.needles):
            return None
        return self.pattern.search(text)


RuleSpec = str | tuple[str, tuple[str, ...]]


def compile_all(patterns: dict[str, RuleSpec], flags: int = re.IGNORECASE | re.MULTILINE) -> dict[str, Rule]:
    """Compile named rules once, at import time. A spec is a pattern, or (pattern, needles) where the
    needles are lower-case substrings of which every match contains at least one."""
    rules = {}
    for name, spec in patterns.items():
        pattern, needles = (spec, ()) if isinstance(spec, str) else spec
        rules[name] = Rule(re.compile(pattern, flags), tuple(needles))
    return rules


def first_match(rules: dict[str, Rule], text: str) -> str | None:
    """The name of the first rule that matches `text`, or None."""
    for name, rule in rules.items():
        if rule.search(text):
            return name
    return None


def with_needles(pattern: str, *needles: str) -> tuple[str, tuple[str, ...]]:
    """A rule spec: `pattern`, which can only match text containing one of `needles` (lower case)."""
    return pattern, needles
