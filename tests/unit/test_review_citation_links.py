"""The reviewer page links each line of evidence to the section it quotes (the sentence marked), and
shows a recorded link only when it is one of the deployment's section paths."""

from __future__ import annotations

from citadel.reviews.evidence import evidence_lines
from citadel.reviews.items import review_item
from citadel.tools.approvals import Approval
from citadel.types import Passage, quote_key, section_url
from serving.http.routers.review.rendering import _item_html

RULE = "Discounts above 10% need the deal desk's approval. Smaller ones are at the seller's discretion."


def _approval(evidence: list[dict]) -> Approval:
    return Approval("a1", "acme", "run-1", "step-1", "crm.update", "sam", {"discount_pct": 12}, "deal-desk",
                    context={"evidence": evidence})


def test_an_evidence_line_carries_the_link_that_opens_its_section_with_the_sentence_marked():
    passage = Passage("acme:pricing/rules:v3:0002", RULE, "pricing/rules", "Pricing Rules", 3, "Pricing > Discounts",
                      None, "pricing.md", 0.9)
    [line] = evidence_lines([passage], "approve a discount of 12%")
    assert line["quote"] == "Discounts above 10% need the deal desk's approval."
    assert line["url"] == section_url("pricing/rules", 3, passage.chunk_id, line["quote"])
    assert line["url"] == ("/v1/documents/pricing%2Frules/versions/3/sections/acme:pricing%2Frules:v3:0002"
                           f"?quote={quote_key(line['quote'])}")
    item = review_item(_approval([line]), None, {"approval_id": "a1"})
    html = _item_html(item, "csrf-token")
    assert f'<a class="citation-link" href="{line["url"]}">Pricing Rules, Discounts</a>' in html


def test_a_recorded_link_that_is_not_a_section_path_is_not_shown_as_one():
    lines = [{"quote": "q", "citation": "Elsewhere", "url": "https://evil.example/phish"},
             {"quote": "q", "citation": "Nowhere", "url": 'javascript:alert("x")'}]
    item = review_item(_approval(lines), None, {"approval_id": "a1"})
    assert [line["url"] for line in item["evidence"]] == [None, None]
    html = _item_html(item, "csrf-token")
    assert "citation-link" not in html and "evil.example" not in html and "javascript:" not in html
