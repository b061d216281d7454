"""The personal-data screen (citadel/guardrails/personal.py): what it masks, and what it leaves alone."""

from __future__ import annotations

import logging

import pytest

from citadel.guardrails.log_masking import PersonalDataLogFilter, install_log_masking
from citadel.guardrails.personal import (MAX_MASKED_CHARS, TRUNCATED, PersonalDataMasker, iban_valid,
                                         mask_personal_data, ssn_valid)

MASKED = [
    ("mail jane.doe@example.com now", "mail [email] now"),
    ("write to j.o'neil+hr@mail.example.co.uk.", None),
    ("ecrire a josé.garcía@exemple.fr svp", "ecrire a [email] svp"),
    ("call +44 20 7946 0958 today", "call [phone] today"),
    ("call +1 (415) 555-0100", "call [phone]"),
    ("US office (415) 555-0100 or 415-555-0100 or 415.555.0100", "US office [phone] or [phone] or [phone]"),
    ("London 020 7946 0958, mobile 07700 900123", "London [phone], mobile [phone]"),
    ("Paris 06 12 34 56 78", "Paris [phone]"),
    ("IBAN GB82 WEST 1234 5698 7654 32 please", "IBAN [iban] please"),
    ("IBAN DE89370400440532013000", "IBAN [iban]"),
    ("account no. 12345678 at the bank", "account no. [account] at the bank"),
    ("acct #0012-3456-78", "acct #[account]"),
    ("sort code 20-00-00 12345678", "sort code [account]"),
    ("SSN 123-45-6789", "SSN [national_id]"),
    ("NI number AB 12 34 56 C", "NI number [national_id]"),
    ("NI AB123456C", "NI [national_id]"),
    ("from 192.168.1.20 yesterday", "from [ip] yesterday"),
    ("host 81.2.69.160:443", "host [ip]:443"),
    ("from 2001:db8::8a2e:370:7334 and fe80::1", "from [ip] and [ip]"),
]

UNCHANGED = [
    "In 2024 the limit rose to $1,250 per night.",
    "See section 3.2.1 and clause 4.10.",
    "Upgrade to version 1.2.3 or v2.0.1, build 10.2.0.1 is broken.",
    "The meeting is on 2024-01-15 at 12:30:45, ratio 3:2:1.",
    "We have 10,000 employees and 1.5 million customers; pages 100-200.",
    "Order 12345678901234567890 was shipped; ISBN 978-3-16-148410-0.",
    "Invalid IBAN GB00 WEST 1234 5698 7654 32 stays as written.",
    "SSN 000-12-3456 and 666-12-3456 are never issued.",
    "An address 999.1.1.1 is no address.",
    "email me at the office",
    "",
]


@pytest.mark.parametrize("text, expected", MASKED)
def test_personal_data_is_masked_with_its_kind(text, expected):
    masked = mask_personal_data(text)
    if expected is not None:
        assert masked == expected
    assert masked != text


@pytest.mark.parametrize("text", UNCHANGED)
def test_years_amounts_sections_versions_and_dates_stay(text):
    assert mask_personal_data(text) == text


def test_checks():
    assert iban_valid("GB82WEST12345698765432") and not iban_valid("GB83WEST12345698765432")
    assert ssn_valid("123-45-6789") and not ssn_valid("900-12-3456") and not ssn_valid("123-00-6789")


def test_known_names_are_masked_as_whole_words_case_insensitively():
    masker = PersonalDataMasker(["alice", "Jane Doe", "al"])
    assert masker.mask("alice asked JANE doe and Alice. palice") == "[name] asked [name] and [name]. palice"
    assert masker.mask("also Al said") == "also Al said"  # too short to mask: it would eat ordinary words
    assert masker.kinds("jane doe at x@y.io") == ["email", "name"]
    assert not PersonalDataMasker().knows_names


def test_every_input_is_bounded():
    text = "x " * MAX_MASKED_CHARS + "jane@example.com"
    masked = mask_personal_data(text)
    assert masked.endswith(TRUNCATED) and "jane@example.com" not in masked
    assert len(masked) == MAX_MASKED_CHARS + len(TRUNCATED)


def test_non_ascii_positions_stay_right():
    assert mask_personal_data("Grüße — ☎ +49 30 1234567, 📧 max@beispiel.de.") == "Grüße — ☎ [phone], 📧 [email]."


def test_the_log_filter_masks_messages_arguments_and_tracebacks():
    masker = PersonalDataMasker(["alice"])
    record = logging.LogRecord("citadel.x", logging.INFO, __file__, 1, "asked by %s at %s", ("alice", "a@b.io"), None)
    assert PersonalDataLogFilter(masker).filter(record)
    assert record.getMessage() == "asked by [name] at [email]"
    try:
        raise ValueError("bad address a@b.io")
    except ValueError:
        import sys

        failed = logging.LogRecord("citadel.x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    PersonalDataLogFilter(masker).filter(failed)
    assert "a@b.io" not in failed.exc_text and "[email]" in failed.exc_text


def test_log_lines_keep_private_addresses_and_mask_public_ones():
    masker = PersonalDataMasker().for_logs()
    assert masker.mask("redis at 10.20.30.40:6379 refused; client 81.2.69.160") == \
        "redis at 10.20.30.40:6379 refused; client [ip]"
    assert mask_personal_data("client 10.20.30.40") == "client [ip]"  # spans and the answer log: every address


def test_install_puts_one_filter_on_the_root_handlers():
    handler = logging.Handler()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        install_log_masking(PersonalDataMasker())
        install_log_masking(PersonalDataMasker(["alice"]))
        filters = [f for f in handler.filters if isinstance(f, PersonalDataLogFilter)]
        assert len(filters) == 1 and filters[0].masker.knows_names
    finally:
        root.removeHandler(handler)
