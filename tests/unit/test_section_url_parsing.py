"""A citation's section URL read back (citadel.types.parse_section_url, section_url's inverse): what the
MCP server's open_citation tool follows."""

from __future__ import annotations

import pytest

from citadel.types import SectionRef, parse_section_url, quote_key, section_url


def test_a_section_url_reads_back_with_its_ids_decoded_and_its_quote_key():
    url = section_url("policies/travel", 3, "acme:policies/travel:v3:0002", "The hotel limit is 220 USD.")
    expected = SectionRef("policies/travel", 3, "acme:policies/travel:v3:0002", quote_key("The hotel limit is 220 USD."))
    assert parse_section_url(url) == expected
    assert parse_section_url(f"https://citadel.example/gateway{url}") == expected  # absolute, under a base path
    assert parse_section_url(section_url("faq", 1, "acme:faq:v1:0000")) == SectionRef("faq", 1, "acme:faq:v1:0000")


@pytest.mark.parametrize("url", ["/v1/retrieve", "/v1/documents/a/versions/1/sections", "",
                                 "/v1/documents//versions/1/sections/c", "/v1/documents/a/versions/one/sections/c",
                                 "/v1/documents/a/versions/\u00b2/sections/c", "/v1/documents/a/versions/1/sections/",
                                 "/v1/documents/a/versions/99999999999/sections/c", "/v1/records/a/versions/1/sections/c"])
def test_anything_else_names_no_section(url):
    assert parse_section_url(url) is None
