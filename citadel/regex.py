"""Linear-time regular expressions for untrusted text: the one place such patterns are compiled.

Every pattern that runs on text from outside (questions, uploaded documents, retrieved passages,
answers built from them) is compiled here with RE2 (`google-re2`), an automaton whose running time is
linear in the input: no input can make it backtrack. Python's `re` backtracks, and one rule
(`[.\\-]{1,6}(?:\\s+/?\\s*[.\\-]{1,6}){8,}`) cost k^7 on a run of k newlines: a 2,000-character
question held the GIL for minutes and froze a whole replica.

Every pattern is registered under a unique name, so a test can enumerate them all and time each on
adversarial input (tests/security/test_regex_linear_time.py).

RE2 has no look-around and no back-references. A rule that needs a look-around keeps a positive RE2
pattern and moves the look-around into code: an `accept` check on each candidate match that reads a
bounded window around it. After a rejected candidate the search resumes one character after its
start (what a backtracking engine would do), on one UTF-8 encoding of the text, so the total cost is
the text's length times the longest candidate, never more.

Python's syntax is translated so a pattern keeps its meaning: `\\w \\d \\s` (and `\\W \\D \\S`) get
their Unicode classes (RE2's are ASCII-only) and `\\Z` becomes RE2's `\\z`. RE2's `\\b` is an ASCII word
boundary: patterns that put `\\b` next to a non-ASCII letter are written without it.

RE2's Python binding builds every match object in Python, which makes a tokeniser (`\\w+` over a
whole document) several times slower than `re`. A pattern that cannot backtrack at all — one character
class, repeated or not, or alternatives that are each one such item, with nothing after the repeat —
runs on `re` instead: at each position it consumes one maximal run and stops, so it is linear too.
`backtrack_free` decides this from the parsed pattern, conservatively; anything else is RE2.

The room is the core (`citadel/`), not `guardrails/`: parsing, chunking, answer, index, embedding and
eval run patterns on document text too, and every room may import a plain core module (DESIGN §2).
"""

from __future__ import annotations

import re  # flag constants, and the engine of patterns `backtrack_free` proves cannot backtrack
import re._constants as sre_constants
import re._parser as sre_parser
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType

import re2

IGNORECASE, MULTILINE, DOTALL = re.IGNORECASE, re.MULTILINE, re.DOTALL

# Python's Unicode meaning of the shorthand classes, as RE2 class contents.
_WORD = r"\p{L}\p{N}_"
_DIGIT = r"\p{Nd}"
_SPACE = r"\t-\r\x1c-\x1f\x85\p{Z}"  # exactly the characters for which str.isspace() is true
_INSIDE_CLASS = {"w": _WORD, "d": _DIGIT, "s": _SPACE}
_OUTSIDE_CLASS = {
    "w": f"[{_WORD}]", "W": f"[^{_WORD}]", "d": _DIGIT, "D": r"\P{Nd}", "s": f"[{_SPACE}]", "S": f"[^{_SPACE}]",
    "Z": r"\z",
}

# A large automaton budget keeps RE2 on its fast DFA for the long rule alternations (it falls back to
# its NFA, slower but still linear, when the budget runs out).
_OPTIONS = re2.Options()
_OPTIONS.max_mem = 64 << 20

_REGISTRY: dict[str, LinearPattern] = {}

# One character: a literal, a class, "." or a category such as \w.
_ATOMS = {sre_constants.LITERAL, sre_constants.NOT_LITERAL, sre_constants.IN, sre_constants.ANY,
          sre_constants.CATEGORY}


def _one_atom(items) -> bool:
    return len(items) == 1 and items[0][0] in _ATOMS


def _single_item(items) -> bool:
    """One character, or one greedy repeat of one character, and nothing else."""
    if _one_atom(items):
        return True
    if len(items) != 1 or items[0][0] is not sre_constants.MAX_REPEAT:
        return False
    _, _, repeated = items[0][1]
    return _one_atom(list(repeated))


def backtrack_free(pattern: str, flags: int = 0) -> bool:
    """True when Python's `re` runs `pattern` in linear time for any input, by construction: a single
    item (see `_single_item`) or alternatives that are each a single item. No item is followed by
    anything, so a repeat never gives characters back, and a failed alternative costs one step."""
    try:
        items = list(sre_parser.parse(pattern, flags))
    except re.error:
        return False
    if len(items) == 1 and items[0][0] is sre_constants.BRANCH:
        return all(_single_item(list(alternative)) for alternative in items[0][1][1])
    return _single_item(items)


def translate(pattern: str, flags: int = 0) -> str:
    """`pattern` in Python `re` syntax, rewritten for RE2 with the same meaning (see the module doc)."""
    out: list[str] = []
    inline = "".join(letter for flag, letter in ((IGNORECASE, "i"), (MULTILINE, "m"), (DOTALL, "s")) if flags & flag)
    if inline:
        out.append(f"(?{inline})")
    in_class = False
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            escaped = pattern[i + 1]
            if escaped in "uU":  # \uXXXX, \UXXXXXXXX: RE2 spells a code point \x{...}
                digits = 4 if escaped == "u" else 8
                out.append(f"\\x{{{pattern[i + 2:i + 2 + digits]}}}")
                i += 2 + digits
                continue
            if in_class and escaped in _INSIDE_CLASS:
                out.append(_INSIDE_CLASS[escaped])
            elif in_class and escaped in "WDS":
                raise ValueError(f"negated class \\{escaped} inside [...] has no RE2 translation: {pattern!r}")
            elif not in_class and escaped in _OUTSIDE_CLASS:
                out.append(_OUTSIDE_CLASS[escaped])
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if char == "[" and not in_class:
            in_class = True
            out.append(char)
            i += 1
            # "]" right after "[" or "[^" is a literal member of the class.
            if i < len(pattern) and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < len(pattern) and pattern[i] == "]":
                out.append(r"\]")
                i += 1
            continue
        if char == "]" and in_class:
            in_class = False
        out.append(char)
        i += 1
    return "".join(out)


def _encodable(text: str) -> str:
    """`text` with lone surrogates (which JSON can carry but UTF-8 cannot) replaced by U+FFFD; the
    length is unchanged, so positions still index the original."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)


def _group_index(match, group: int | str) -> int:
    """re2's match positions take group numbers only."""
    return match.re.groupindex[group] if isinstance(group, str) else group


class Candidate:
    """A candidate match seen by an `accept` check: bounded windows of the text around it."""

    __slots__ = ("_data", "_match")

    def __init__(self, data: bytes, match) -> None:
        self._data = data
        self._match = match

    def before(self, chars: int) -> str:
        """Up to `chars` characters just before the match."""
        start = self._match.start()
        return self._data[max(0, start - 4 * chars):start].decode("utf-8", "ignore")[-chars:]

    def after(self, chars: int, group: int | str = 0) -> str:
        """Up to `chars` characters just after the match (or after `group`)."""
        end = self._match.end(_group_index(self._match, group))
        return self._data[end:end + 4 * chars].decode("utf-8", "ignore")[:chars]

    def group(self, group: int | str = 0) -> str | None:
        value = self._match.group(group)
        return None if value is None else value.decode("utf-8")


class AcceptedMatch:
    """The accepted candidate of a look-around pattern, with positions in characters."""

    __slots__ = ("_data", "_match", "string")

    def __init__(self, text: str, data: bytes, match) -> None:
        self.string, self._data, self._match = text, data, match

    def group(self, group: int | str = 0) -> str | None:
        value = self._match.group(group)
        return None if value is None else value.decode("utf-8")

    def start(self, group: int | str = 0) -> int:
        return len(self._data[:self._match.start(_group_index(self._match, group))].decode("utf-8"))

    def end(self, group: int | str = 0) -> int:
        return len(self._data[:self._match.end(_group_index(self._match, group))].decode("utf-8"))

    def span(self, group: int | str = 0) -> tuple[int, int]:
        return self.start(group), self.end(group)


class _Shifted:
    """A match in a slice, with positions in the whole text."""

    __slots__ = ("_match", "_offset")

    def __init__(self, match, offset: int) -> None:
        self._match, self._offset = match, offset

    def group(self, *groups):
        return self._match.group(*groups)

    def groups(self, default=None):
        return self._match.groups(default)

    def start(self, group: int = 0) -> int:
        return self._match.start(group) + self._offset

    def end(self, group: int = 0) -> int:
        return self._match.end(group) + self._offset

    def span(self, group: int = 0) -> tuple[int, int]:
        return self.start(group), self.end(group)


Accept = Callable[[Candidate], bool]


class LinearPattern:
    """A registered RE2 pattern with the `re.Pattern` methods the project uses, and optionally an
    `accept` check standing in for a look-around (then only `search` is offered)."""

    __slots__ = ("name", "source", "flags", "accept", "regex", "engine", "_plain_engine")

    def __init__(self, name: str, source: str, flags: int = 0, accept: Accept | None = None) -> None:
        self.name, self.source, self.flags, self.accept = name, source, flags, accept
        try:
            self.regex = re2.compile(translate(source, flags), _OPTIONS)
        except re2.error as error:
            raise ValueError(f"pattern {name!r} is not valid RE2 ({error}): {source!r}") from None
        if accept is None and backtrack_free(source, flags):
            self.engine, self._plain_engine = "re (backtrack-free)", re.compile(source, flags)
        else:
            self.engine, self._plain_engine = "re2", self.regex

    def __repr__(self) -> str:
        return f"LinearPattern({self.name!r})"

    @property
    def pattern(self) -> str:
        return self.source

    def search(self, text: str, pos: int = 0):
        text = _encodable(text)
        if self.accept is None:
            return self._plain_engine.search(text, pos)
        return self._search_accepted(text, pos)

    def _search_accepted(self, text: str, pos: int) -> AcceptedMatch | None:
        return next(self._candidates(text, pos, accepted_only=True, resume=None), None)

    def scan(self, text: str, resume: int | str) -> Iterator[AcceptedMatch]:
        """Every match, each search resuming on the last character of group `resume` rather than after
        the whole match: a pattern that matches the character before its group and the one after it,
        to stand in for a look-behind and a look-ahead (`(?:^|[^\\w-])(...)(?:[^\\w-]|$)`), leaves both
        to the next match, as look-arounds would. Only the first character a look-behind may see
        has to be outside the group's last character class (the patterns here require a non-word
        character there, and the groups end in a word character or a symbol the next match may use)."""
        return self._candidates(_encodable(text), 0, accepted_only=False, resume=resume)

    def _candidates(
        self, text: str, pos: int, accepted_only: bool, resume: int | str | None
    ) -> Iterator[AcceptedMatch]:
        """Matches found on one UTF-8 encoding of `text` (so each search costs only what it scans).
        With `accepted_only`, a candidate the `accept` check rejects is skipped and the search
        resumes one character after its start, as a backtracking engine's would."""
        data = text.encode("utf-8")
        at = len(text[:pos].encode("utf-8"))
        while at <= len(data):
            match = self.regex.search(data, at)
            if match is None:
                return
            if not accepted_only:
                yield AcceptedMatch(text, data, match)
                # Resume on the group's last character: a "%" ending one figure is the character
                # before the next, as a look-behind would see it (a word character never is).
                at = max(match.end(_group_index(match, resume)) - 1, match.start() + 1)
                while at > match.start() + 1 and data[at] & 0xC0 == 0x80:  # back to a character's first byte
                    at -= 1
            elif self.accept is None or self.accept(Candidate(data, match)):
                yield AcceptedMatch(text, data, match)
                at = max(match.end(), match.start() + 1)
            else:
                at = match.start() + 1
            while at < len(data) and data[at] & 0xC0 == 0x80:  # to the next character's first byte
                at += 1

    def split_at(self, text: str, *groups: str) -> list[str]:
        """`text` cut at the span of the first of `groups` that took part in each match; the rest of
        the match stays in the pieces. This replaces a split on a look-behind or look-ahead: the
        pattern matches the looked-at characters around a named cut."""
        pieces, done = [], 0
        for match in self.finditer(text):
            group = next(name for name in groups if match.group(name) is not None)
            pieces.append(text[done:match.start(_group_index(match, group))])
            done = match.end(_group_index(match, group))
        pieces.append(text[done:])
        return pieces

    def _plain(self):
        if self.accept is not None:
            raise TypeError(f"pattern {self.name!r} has an accept check: only search() applies")
        return self._plain_engine

    def match(self, text: str, pos: int = 0):
        return self._plain().match(_encodable(text), pos)

    def fullmatch(self, text: str):
        return self._plain().fullmatch(_encodable(text))

    def finditer(self, text: str, pos: int = 0, endpos: int | None = None) -> Iterator:
        """Matches in `text[pos:endpos]`. The slice is searched on its own (what it costs is what it
        scans: re2 would encode the whole text per call), so `^`, `$` and `\\b` see its ends as edges."""
        if pos == 0 and endpos is None:
            return self._plain().finditer(_encodable(text))
        return (_Shifted(match, pos) for match in self._plain().finditer(_encodable(text[pos:endpos])))

    def findall(self, text: str) -> list:
        return self._plain().findall(_encodable(text))

    def sub(self, repl, text: str, count: int = 0) -> str:
        return self._plain().sub(repl, _encodable(text), count)

    def subn(self, repl, text: str, count: int = 0) -> tuple[str, int]:
        return self._plain().subn(repl, _encodable(text), count)

    def split(self, text: str, maxsplit: int = 0) -> list[str]:
        return self._plain().split(_encodable(text), maxsplit)


def compile(name: str, pattern: str, flags: int = 0, accept: Accept | None = None) -> LinearPattern:
    """Compile `pattern` (Python syntax, no look-around) with RE2 and register it as `name`."""
    existing = _REGISTRY.get(name)
    if existing is not None and (existing.source, existing.flags) != (pattern, flags):
        raise ValueError(f"a different pattern named {name!r} is already registered")
    compiled = LinearPattern(name, pattern, flags, accept)
    _REGISTRY[name] = compiled
    return compiled


def registered() -> Mapping[str, LinearPattern]:
    """Every pattern compiled through this module, by name (for the linear-time test)."""
    return MappingProxyType(_REGISTRY)
