"""Personal data in text that outlives a request: found, and masked with a typed placeholder.

Spans, log lines and the answer log are read by anyone with access to the files or the collector, so
the e-mail addresses, phone numbers, bank details, national ids, IP addresses and known user names a
question (or an answer built from it) holds are replaced by "[email]", "[phone]", "[iban]",
"[account]", "[national_id]", "[ip]" and "[name]" before the text leaves the process. Unlike a card
number or a secret (citadel/guardrails/redaction.py withholds the whole question), the rest of the
text stays readable: the question is still worth auditing without its contact details.

Every pattern is linear-time RE2 (citadel.regex). A candidate is checked in code where a pattern
alone would over-match (the IBAN's mod-97, a phone number's digit count, an SSN's reserved ranges, an
IP octet's range), so years, amounts, section numbers, dates and version strings stay as written.
Every input is bounded (`MAX_MASKED_CHARS`): a longer text is cut and marked, never scanned whole.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from citadel import regex

# Longest text masked; the rest is cut and marked (a span field, a log line or an answer is far shorter).
MAX_MASKED_CHARS = 32_768
TRUNCATED = " [truncated]"
# A known name shorter than this is not masked: "al" or "jo" would eat ordinary words.
MIN_NAME_CHARS = 3
# Longest known name, in words ("Mary Ann de Vries").
MAX_NAME_WORDS = 4

EMAIL, PHONE, IBAN, ACCOUNT, NATIONAL_ID, IP, NAME = "email", "phone", "iban", "account", "national_id", "ip", "name"


def placeholder(kind: str) -> str:
    return f"[{kind}]"


# ---------------------------------------------------------------------- patterns
_EMAIL = regex.compile(
    "guardrails.personal.email",
    r"[a-z0-9._%+\-\u0080-\U0010ffff]{1,64}@[a-z0-9\-.\u0080-\U0010ffff]{1,253}\.[a-z]{2,24}", regex.IGNORECASE)
# Two letters of a country, two check digits, then 11-30 letters and digits, in groups of four or not.
_IBAN = regex.compile(
    "guardrails.personal.iban", r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b")
# "+44 20 7946 0958", "+1 (415) 555-0100", "+49-30-123456".
_PHONE_INTERNATIONAL = regex.compile(
    "guardrails.personal.phone_international", r"\+[0-9]{1,3}(?:[ .\-]?\(?[0-9]{1,5}\)?){1,6}")
# North American "(415) 555-0100", "415-555-0100", "415.555.0100".
_PHONE_NANP = regex.compile(
    "guardrails.personal.phone_nanp", r"(?:\([0-9]{3}\) ?|\b[0-9]{3}[.\-])[0-9]{3}[.\-][0-9]{4}\b")
# A national number with its trunk 0: "020 7946 0958", "07700 900123", "06 12 34 56 78".
_PHONE_TRUNK = regex.compile(
    "guardrails.personal.phone_trunk", r"\b0[0-9]{1,4}(?:[ \-]?[0-9]{2,4}){2,4}\b")
# US social security number "123-45-6789"; labelled "SSN 123456789".
_SSN = regex.compile(
    "guardrails.personal.ssn", r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b|\bssn:?\s{0,3}#?\s{0,3}[0-9]{9}\b", regex.IGNORECASE)
# UK National Insurance number "QQ 12 34 56 C" (the first two letters exclude D F I Q U V, the second O).
_NI_NUMBER = regex.compile(
    "guardrails.personal.ni_number",
    r"\b[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?[0-9]{2} ?[0-9]{2} ?[0-9]{2} ?[A-D]\b")
# An account number named as one: "account no. 12345678", "acct #0012-3456-78", "a/c 31926819".
_ACCOUNT = regex.compile(
    "guardrails.personal.account",
    r"\b(?:account|acct|a/c)(?:\s{1,3}(?:no\.?|number|num\.?|#))?\s{0,3}[:#]?\s{0,3}(?P<number>[0-9][0-9 \-]{4,22}[0-9])",
    regex.IGNORECASE)
# A UK sort code with its account number: "20-00-00 12345678".
_SORT_CODE_ACCOUNT = regex.compile(
    "guardrails.personal.sort_code_account", r"\b[0-9]{2}-[0-9]{2}-[0-9]{2},? {1,3}[0-9]{8}\b")
_IPV4 = regex.compile("guardrails.personal.ipv4", r"\b[0-9]{1,3}(?:\.[0-9]{1,3}){3}\b")
_IPV6 = regex.compile("guardrails.personal.ipv6", r"[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}", regex.IGNORECASE)
# The words a known name is matched against (a name is a run of these, lower-cased, its punctuation
# trimmed). One repeated class: backtrack-free, so it runs on `re`, far cheaper per match than RE2's binding.
_WORD = regex.compile("guardrails.personal.word", r"[\w.'\-]+")
_WORD_PUNCTUATION = ".'-"

_DIGITS = str.maketrans("", "", " .-()+")
# Phone numbers hold 8-15 digits (E.164 caps them at 15); a national one with its trunk 0, 10-11.
PHONE_DIGITS = (8, 15)
TRUNK_PHONE_DIGITS = (10, 11)
IBAN_CHARS = (15, 34)


# ---------------------------------------------------------------------- checks
def iban_valid(text: str) -> bool:
    """ISO 13616: the country code and check digits moved to the end, letters as 10..35, mod 97 is 1."""
    compact = text.replace(" ", "").upper()
    if not IBAN_CHARS[0] <= len(compact) <= IBAN_CHARS[1] or not compact.isalnum() or not compact.isascii():
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in rearranged)) % 97 == 1


def _digit_count(text: str) -> int:
    return sum(char.isdigit() for char in text)


def _phone_international(text: str) -> bool:
    return PHONE_DIGITS[0] <= _digit_count(text) <= PHONE_DIGITS[1]


def _phone_trunk(text: str) -> bool:
    """"020 7946 0958" but not "0.5" or a run that only starts with 0 and is a reference ("2024 01")."""
    return TRUNK_PHONE_DIGITS[0] <= _digit_count(text) <= TRUNK_PHONE_DIGITS[1]


def ssn_valid(text: str) -> bool:
    """Area 001-899 except 666, group 01-99, serial 0001-9999 (the SSA never issues the others)."""
    digits = "".join(char for char in text if char.isdigit())[-9:]
    area, group, serial = int(digits[:3]), int(digits[3:5]), int(digits[5:])
    return 0 < area < 900 and area != 666 and group > 0 and serial > 0


def _ni_valid(text: str) -> bool:
    return text[:2].upper() not in {"BG", "GB", "NK", "KN", "TN", "NT", "ZZ"}


def _ipv4_valid(text: str) -> bool:
    return all(int(octet) <= 255 for octet in text.split("."))


def _ipv6_valid(text: str) -> bool:
    """A real IPv6 address ("2001:db8::1"), not a time of day ("12:30:45") or a ratio."""
    if text.count(":") < 2 or not any(char.isalnum() for char in text):
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _public_address(valid: Callable[[str], bool]) -> Callable[[str], bool]:
    """`valid`, and routable on the internet: a user's address, not a server's (10.x, 192.168.x,
    loopback, link-local and documentation addresses are infrastructure an operator's log must name)."""
    return lambda text: valid(text) and ipaddress.ip_address(text).is_global


def _touches_other_text(text: str, start: int, end: int) -> bool:
    """Letters, digits or dots touching the match: it is part of a longer number, a version string
    ("1.2.3.4.5"), a path or a word, not a value of its own."""
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    after_next = text[end + 1] if end + 1 < len(text) else " "
    return before.isalnum() or before in "._/" or after.isalnum() or (after in ".-" and after_next.isalnum())


# Words that make a dotted quad a version or a section, not an address ("version 10.2.0.1").
_NOT_AN_ADDRESS = ("version", "release", "build", "section", "clause", "v")


def _named_as_version(text: str, start: int) -> bool:
    return text[max(0, start - 12):start].lower().rstrip(" :#").endswith(_NOT_AN_ADDRESS)


@dataclass(frozen=True)
class _Screen:
    """One kind of personal data: a pattern; a check on each candidate's value (None: every match);
    `trigger`, what the text must hold for the pattern to run at all ("digit", "@" or ":");
    `standalone`: the value must not touch other letters or digits (an account number is named by
    the words before it, so it need not); `group`: the part of the match that is masked."""

    kind: str
    pattern: regex.LinearPattern
    check: Callable[[str], bool] | None = None
    trigger: str = "digit"
    standalone: bool = True
    group: int = 0
    context: Callable[[str, int], bool] | None = None  # True: the words before make it something else

    def spans(self, text: str) -> list[tuple[int, int]]:
        found = []
        for match in self.pattern.finditer(text):
            start, end = match.span(self.group)
            if self.check is not None and not self.check(text[start:end]):
                continue
            if self.standalone and _touches_other_text(text, start, end):
                continue
            if self.context is not None and self.context(text, start):
                continue
            found.append((start, end))
        return found


# Most specific first: an e-mail address holds dots and digits a later screen would take a piece of.
SCREENS: tuple[_Screen, ...] = (
    _Screen(EMAIL, _EMAIL, trigger="@", standalone=False),
    _Screen(IBAN, _IBAN, iban_valid),
    _Screen(ACCOUNT, _SORT_CODE_ACCOUNT),
    _Screen(ACCOUNT, _ACCOUNT, standalone=False, group=1),
    _Screen(NATIONAL_ID, _SSN, ssn_valid),
    _Screen(NATIONAL_ID, _NI_NUMBER, _ni_valid),
    _Screen(IP, _IPV6, _ipv6_valid, trigger=":"),
    _Screen(IP, _IPV4, _ipv4_valid, context=_named_as_version),
    _Screen(PHONE, _PHONE_INTERNATIONAL, _phone_international),
    _Screen(PHONE, _PHONE_NANP),
    _Screen(PHONE, _PHONE_TRUNK, _phone_trunk),
)
# Log lines are for operators: a failing server's private address stays, a user's public one goes.
LOG_SCREENS: tuple[_Screen, ...] = tuple(
    replace(screen, check=_public_address(screen.check)) if screen.kind == IP else screen for screen in SCREENS)


# ---------------------------------------------------------------------- the masker
class PersonalDataMasker:
    """Masks the personal data in a text; `names`: the user names and ids the catalog knows, masked
    wherever they appear as whole words (case-insensitive). Build one per process and share it."""

    def __init__(self, names: Iterable[str] = (), screens: tuple[_Screen, ...] = SCREENS):
        self._names = frozenset(_name_key(name) for name in names if len(name.strip()) >= MIN_NAME_CHARS)
        self._longest = max((key.count(" ") + 1 for key in self._names), default=0)
        self._screens = screens

    def for_logs(self) -> "PersonalDataMasker":
        """The same masker for operators' log lines: private (infrastructure) IP addresses kept."""
        masker = PersonalDataMasker((), LOG_SCREENS)
        masker._names, masker._longest = self._names, self._longest
        return masker

    @property
    def knows_names(self) -> bool:
        return bool(self._names)

    def mask(self, text: str) -> str:
        """`text` with each piece of personal data replaced by its placeholder (bounded: see the module)."""
        if len(text) > MAX_MASKED_CHARS:
            text = text[:MAX_MASKED_CHARS] + TRUNCATED
        for screen in _relevant(text, self._screens):
            text = _replace(text, screen.spans(text), placeholder(screen.kind))
        if self._names:
            text = _replace(text, self._name_spans(text), placeholder(NAME))
        return text

    def kinds(self, text: str) -> list[str]:
        """The kinds of personal data `text` holds, in screen order (for tests and reports)."""
        text = text[:MAX_MASKED_CHARS]
        found = [s.kind for s in _relevant(text, self._screens) if s.spans(text)]
        if self._names and self._name_spans(text):
            found.append(NAME)
        return list(dict.fromkeys(found))

    def _name_spans(self, text: str) -> list[tuple[int, int]]:
        """Runs of up to MAX_NAME_WORDS words that spell a known name: a set lookup per run, linear."""
        words = [word for match in _WORD.finditer(text) if (word := _trimmed_word(match))[1]]
        spans, index = [], 0
        while index < len(words):
            for length in range(min(self._longest, MAX_NAME_WORDS, len(words) - index), 0, -1):
                if " ".join(word.lower() for _, word in words[index:index + length]) in self._names:
                    last_start, last_word = words[index + length - 1]
                    spans.append((words[index][0], last_start + len(last_word)))
                    index += length
                    break
            else:
                index += 1
        return spans


def _trimmed_word(match) -> tuple[int, str]:
    """(start, word) of a word match without the punctuation around it ("Alice." -> "Alice")."""
    raw = match.group(0)
    word = raw.lstrip(_WORD_PUNCTUATION)
    start = match.start() + len(raw) - len(word)
    return start, word.rstrip(_WORD_PUNCTUATION)


def _name_key(name: str) -> str:
    return " ".join(name.lower().split())


def _relevant(text: str, screens: tuple[_Screen, ...]) -> list[_Screen]:
    """The screens that can match at all: most need a digit, the e-mail an "@" (a test far cheaper
    than a pattern, so text without either costs almost nothing)."""
    present = {"digit": any(char.isdigit() for char in text), "@": "@" in text, ":": text.count(":") >= 2}
    return [screen for screen in screens if present[screen.trigger]]


def _replace(text: str, spans: list[tuple[int, int]], replacement: str) -> str:
    if not spans:
        return text
    pieces, done = [], 0
    for start, end in spans:
        pieces += [text[done:start], replacement]
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


# The masker of a process that knows no names (spans emitted before the wiring set one up, tests).
PATTERNS_ONLY = PersonalDataMasker()


def mask_personal_data(text: str) -> str:
    """`text` masked by the patterns alone (no known names)."""
    return PATTERNS_ONLY.mask(text)
