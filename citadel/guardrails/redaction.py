"""What of a user's text may be kept: in the answer log, in spans, in any record that outlives the request.

A question that holds a card number or a secret is never stored, not even in part: the router's reply
tells the user it "was not processed or stored", and every record agrees. Withholding the whole
question (rather than masking the match) also covers what the patterns miss around the match (the
expiry date and CVC that follow a card number, the account a password belongs to).

Personal data (e-mail addresses, phone numbers, bank details, national ids, IP addresses, known user
names) is masked instead (citadel/guardrails/personal.py): each value becomes a typed placeholder in
every text of the record, and the rest stays readable for the audit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from citadel.catalog.base import WITHHELD_QUESTION
from citadel.guardrails.personal import PATTERNS_ONLY, PersonalDataMasker
from citadel.guardrails.pii import sensitive_data_kind
from citadel.guardrails.router import SENSITIVE_DATA

# What a span holds in place of a text field that carries sensitive data.
REDACTED = "[redacted]"
# Answer-log fields made from the question's words, dropped with a withheld question.
DERIVED_FROM_QUESTION = ("search_query",)

__all__ = ["REDACTED", "SENSITIVE_DATA", "WITHHELD_QUESTION", "loggable_question", "masked_record",
           "redacted_text", "withheld_entry"]


def loggable_question(question: str, refusal_reason: str | None) -> str:
    """The question as a record may keep it: withheld when the router refused it as sensitive data,
    or when it holds sensitive data whatever happened to it (a router turned off, a remote one)."""
    if refusal_reason == SENSITIVE_DATA or sensitive_data_kind(question):
        return WITHHELD_QUESTION
    return question


def withheld_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A log entry of a withheld question: without what was derived from the question's words (the
    search query, the gate's missing terms), every other text redacted if it carries sensitive data."""
    kept = {k: v for k, v in entry.items() if k not in DERIVED_FROM_QUESTION}
    if isinstance(kept.get("gate"), dict):
        kept["gate"] = {k: v for k, v in kept["gate"].items() if k != "missing_terms"}
    return _redacted(kept)


def _redacted(value: Any) -> Any:
    return _each_text(value, redacted_text)


def _each_text(value: Any, change: Callable[[str], str]) -> Any:
    """`value` (a JSON-like record) with `change` applied to every text in it, at any depth."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {k: _each_text(v, change) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_each_text(v, change) for v in value]
    return value


def redacted_text(text: str) -> str:
    """`text`, or REDACTED when it carries a card number or a secret."""
    return REDACTED if sensitive_data_kind(text) else text


def masked_record(question: str, entry: dict[str, Any],
                  masker: PersonalDataMasker = PATTERNS_ONLY) -> tuple[str, dict[str, Any]]:
    """The question and its log entry with personal data masked in every text. When the question held
    some, the gate's missing terms go too: they are single words of the question, so pieces of an
    address or a number ("jane", "7946") that no pattern recognises alone."""
    masked_question = masker.mask(question)
    if masked_question != question and isinstance(entry.get("gate"), dict):
        entry = {**entry, "gate": {k: v for k, v in entry["gate"].items() if k != "missing_terms"}}
    return masked_question, _each_text(entry, masker.mask)
