"""Text normalisation shared by the guardrail rules.

Attackers hide trigger phrases behind zero-width characters, full-width letters or odd spacing, so
every rule runs over the same normalised, lower-cased text.
"""

from __future__ import annotations

import html
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from citadel import regex
from citadel.regex import Accept, LinearPattern

# Characters that render as nothing but split a phrase for a naive pattern: zero-width spaces and
# joiners, bidirectional controls, the word joiner family, the BOM, soft hyphen, the Mongolian vowel
# separator (whitespace in old Unicode versions) and the combining grapheme joiner.
_INVISIBLE = "\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2060\u2061\u2062\u2063\u2064" \
    "\u2066\u2067\u2068\u2069\ufeff\u00ad\u180e\u034f\u061c"
# Every character Python's str.isspace() accepts (tests/security check the list stays complete)
# becomes a plain space, so no rule can be dodged (or slowed) with tabs, NBSP, U+2000-U+200A,
# U+2028/2029, U+3000, vertical tabs, form feeds or carriage returns. Only "\n" stays a line break:
# it is the one the rules treat as one (`^`, `[^.?!\n]`), so folding U+2028 into it would let an
# attacker end a "sentence" in the middle of "ignore<U+2028>previous instructions".
LINE_BREAKS = "\n"
SPACES = "\t\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
    "\u2028\u2029\u202f\u205f\u3000"
_ONE_PASS = str.maketrans(
    {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'}
    | dict.fromkeys(_INVISIBLE, None)
    | dict.fromkeys(SPACES, " ")
)
# A run of whitespace holding a line break is one "\n"; any other run is one space.
_LINE_BREAK_RUN = regex.compile("guardrails.text.line_break_run", r" *\n[ \n]*")
_SPACE_RUN = regex.compile("guardrails.text.space_run", r" {2,}")


def normalise(text: str) -> str:
    """HTML entities decoded, NFKC, no invisible characters, straight quotes, every whitespace class
    folded to one space or one newline, lower case. Each step is one linear pass."""
    text = unicodedata.normalize("NFKC", html.unescape(text)).translate(_ONE_PASS)
    text = _SPACE_RUN.sub(" ", _LINE_BREAK_RUN.sub("\n", text))
    return text.lower().strip()


@dataclass(frozen=True)
class Rule:
    """A compiled pattern, with literal substrings at least one of which any match must contain.

    Checking the needles with `in` costs microseconds, so most texts skip the pattern entirely: this
    keeps a scan of every retrieved passage (or 15k handbook paragraphs) fast. The pattern is a
    linear-time `LinearPattern`, or a `CodeCheck` where a look-around became a few lines of code.
    """

    pattern: LinearPattern | CodeCheck
    needles: tuple[str, ...] = ()

    def search(self, text: str):
        if self.needles and not any(needle in text for needle in self.needles):
            return None
        return self.pattern.search(text)


@dataclass(frozen=True)
class CodeCheck:
    """A rule written as code (over registered linear patterns) where a regex alone would need
    look-around; `search` returns a truthy value when the rule fires."""

    check: Callable[[str], bool]
    needles: tuple[str, ...] = ()

    def search(self, text: str) -> bool:
        return self.check(text)


@dataclass(frozen=True)
class Spec:
    """A rule spec with an `accept` check standing in for a look-around (see citadel.regex)."""

    pattern: str
    needles: tuple[str, ...] = ()
    accept: Accept | None = None


RuleSpec = str | tuple[str, tuple[str, ...]] | Spec | CodeCheck


def compile_all(
    table: str, patterns: dict[str, RuleSpec], flags: int = regex.IGNORECASE | regex.MULTILINE
) -> dict[str, Rule]:
    """Compile named rules once, at import time, registering each as "<table>.<name>". A spec is a
    pattern, (pattern, needles) where the needles are lower-case substrings of which every match
    contains at least one, a `Spec`, or a `CodeCheck`."""
    rules = {}
    for name, spec in patterns.items():
        if isinstance(spec, CodeCheck):
            rules[name] = Rule(spec, spec.needles)
            continue
        if isinstance(spec, str):
            spec = Spec(spec)
        elif isinstance(spec, tuple):
            spec = Spec(spec[0], tuple(spec[1]))
        rules[name] = Rule(regex.compile(f"{table}.{name}", spec.pattern, flags, spec.accept), spec.needles)
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


def with_check(pattern: str, accept: Accept, *needles: str) -> Spec:
    """A rule spec whose look-around is `accept`, run on each candidate match (see citadel.regex)."""
    return Spec(pattern, needles, accept)
