"""Sensitive data a user should never paste into a question: payment card numbers and secrets.

The router refuses such a question before it is embedded, cached or logged, so the secret goes no
further than this check.
"""

from __future__ import annotations

from citadel import regex
from citadel.guardrails.text import compile_all, first_match, with_check
from citadel.regex import Candidate

# ISO/IEC 7812 primary account numbers are 13 to 19 digits long.
CARD_MIN_DIGITS = 13
CARD_MAX_DIGITS = 19

# The ways card numbers are written: one run of digits, groups of four ("4111 1111 1111 1111",
# "4111-1111-1111-1111", a short last group for 19 digits) or the American Express 4-6-5 layout.
# Letters or digits on either side mean it is part of something else (a hex string, an id). RE2 has
# no look-around, so the characters either side are matched (or the text's edge) and the next search
# resumes at the end of the number, leaving the character after it to the next candidate.
_CARD_CANDIDATE = regex.compile(
    "guardrails.pii.card_candidate",
    r"(?:^|[^\w-])(\d{%d,%d}|\d{4}(?:[ -]\d{4}){2,3}(?:[ -]\d{1,3})?|\d{4}[ -]\d{6}[ -]\d{4,5}"
    r")(?:[^\w-]|$)" % (CARD_MIN_DIGITS, CARD_MAX_DIGITS),
)
_SEPARATORS = regex.compile("guardrails.pii.card_separators", r"[ -]")


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum every payment card number satisfies."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2 == 1:  # every second digit from the right is doubled
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def find_card_number(text: str) -> str | None:
    """The first Luhn-valid 13-19 digit number in `text` (separators removed), or None.

    A run of one repeated digit ("0000 0000 0000 0000") passes Luhn but is a placeholder, not a card.
    """
    for match in _CARD_CANDIDATE.scan(text, resume=1):
        digits = _SEPARATORS.sub("", match.group(1))
        if CARD_MIN_DIGITS <= len(digits) <= CARD_MAX_DIGITS and len(set(digits)) > 1 and luhn_valid(digits):
            return digits
    return None


# Words that may follow "my password is" without being the password: the user is describing a
# problem ("my password is expired"), not sharing the secret.
_NOT_A_SECRET = (
    r"(not|no|n't|expired|expiring|locked|wrong|incorrect|invalid|too|being|blocked|compromised|stolen|weak|the|a|an"
    r"|same|different|still|correct|working|broken|set|required|changed|reset|missing|lost|forgotten|on|in|for|about"
    r"|going|case|longer|shorter|strong|secure|saved|stored|synced|managed|due|supposed|also|already|always|never|now"
    r"|only|just|over|under|less|more|very|what|which|that|this|it)"
)
# Up to two words naming the account between the possessive and the secret ("my GitHub password").
_SERVICE_WORDS = r"([a-z0-9][\w.-]*\s+){0,2}?"
_SECRET_WORDS = r"(password|passwd|passphrase|passcode|pin|pwd|pw|api key|secret key|access key|token)"
_NOT_A_SECRET_WORD = regex.compile("guardrails.pii.not_a_secret", rf"{_NOT_A_SECRET}\b", regex.IGNORECASE)
_SECRET_SYMBOLS = frozenset("!@#$%^&*_+=~")


def _names_a_value(candidate: Candidate) -> bool:
    """"my password is hunter2", not "my password is expired" (look-ahead in code: RE2 has none)."""
    value = candidate.group("value")
    return not _NOT_A_SECRET_WORD.match(value[:32] + candidate.after(1, "value"))


def _value_with_digit_or_symbol(candidate: Candidate) -> bool:
    """The non-space run from the value's start holds a digit or a symbol ("Summer2024!")."""
    run = (candidate.group("value") + candidate.after(64, "value")).split(maxsplit=1)[0]
    return any(char.isdecimal() or char in _SECRET_SYMBOLS for char in run)


SECRET_PATTERNS = compile_all("guardrails.pii.secrets", {
    # "my password is hunter2", "here's my passcode: 4921"
    "password_shared": with_check(
        rf"\b(my|our|the|his|her|their)\s+{_SERVICE_WORDS}{_SECRET_WORDS}\s+(is|was|=|:)\s+"
        r"(?P<value>[\"'`]?\S{3,})",
        _names_a_value,
    ),
    # "reset my email password to Summer2024!": a new value with a digit or a symbol in it.
    "password_set_to": with_check(
        rf"\b(my|our|the|his|her|their)\s+{_SERVICE_WORDS}{_SECRET_WORDS}\s+to\s+"
        r"[\"'`]?(?P<value>[^\s\"'`]{4,})",
        _value_with_digit_or_symbol,
    ),
    # "password: Tr0ub4dor&3", "pwd=hunter2": a label then a value with a digit or a symbol.
    "labelled_secret": with_check(
        rf"\b{_SECRET_WORDS}\s*[:=]\s*[\"'`]?(?P<value>[^\s\"'`]{{4,}})",
        _value_with_digit_or_symbol,
    ),
    # Provider key formats with a recognisable prefix.
    "openai_key": r"\bsk-(proj-|live-|test-)?[a-z0-9_\-]{20,}",
    "aws_access_key": r"\b(akia|asia)[0-9a-z]{16}\b",
    "github_token": r"\b(ghp|gho|ghu|ghs|ghr)_[a-z0-9]{30,}\b|\bgithub_pat_[a-z0-9_]{30,}",
    "slack_token": r"\bxox[abprs]-[a-z0-9-]{10,}",
    "google_api_key": r"\baiza[0-9a-z_\-]{35}\b",
    "private_key": r"-----begin ([a-z]+ )?private key-----",
    "jwt": r"\beyj[a-z0-9_-]{10,}\.eyj[a-z0-9_-]{10,}\.[a-z0-9_-]{10,}",
})


def find_secret(text: str) -> str | None:
    """The kind of secret found in `text` ("password_shared", "aws_access_key", ...), or None."""
    return first_match(SECRET_PATTERNS, text)


def sensitive_data_kind(text: str) -> str | None:
    """"card_number", a secret kind, or None."""
    if find_card_number(text):
        return "card_number"
    return find_secret(text)
