"""The running example's decision over HTTP: a Northwind sales user asks "Acme renews
next month. Are they eligible for the multi-year discount?" through the runs API, and the `final`
event's answer opens with the verdict and its comparisons, each operand cited where it stands and
each citation the document it came from. With the agreement withdrawn (as `make demo` step 13 does),
the tenure is unsettled and the answer opens with the conditional instead — never a verdict. The
service's clock is 2 November 2026, so "next month" is December 2026."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from citadel.answer.validator import marker_numbers, split_claims
from tests.integration.conftest import EXAMPLES, make_home
from tests.integration.test_api import client_for
from tests.settable_clock import SettableClock

QUESTION = "Acme renews next month. Are they eligible for the multi-year discount?"
SAM = {"tenant": "northwind", "user": "sam", "groups": ("sales",)}
NOW = datetime.datetime(2026, 11, 2, 12, 0, tzinfo=datetime.timezone.utc).timestamp()


@pytest.fixture
def deployment(tmp_path):
    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.embedding.factory import make_embedder
    from citadel.ingest.local import Ingestor
    from citadel.ingest.sources import AclSpec, discover

    home = make_home(tmp_path / "home")
    catalog = SQLiteCatalog(home.config.catalog_path)
    northwind = EXAMPLES / "northwind"
    Ingestor(catalog, make_embedder(home.config.embedding), home.config).ingest(
        "northwind", discover([northwind], trust_front_matter=True), AclSpec.from_file(northwind / "acl.yaml"))
    catalog.close()
    clock = SettableClock(NOW)
    with client_for(home, clock=clock) as client:
        yield home, client
        client.app.state.services.runs.wait_for_runs(60)


def final_of(client, home) -> dict:
    headers = home.headers(**SAM, now=NOW)
    conversation = client.post("/v1/conversations", headers=headers).json()["conversation_id"]
    posted = client.post(f"/v1/conversations/{conversation}/messages", headers=headers, json={"content": QUESTION})
    assert posted.status_code == 202, posted.text
    client.app.state.services.runs.wait_for_runs(60)
    events = client.get(f"/v1/runs/{posted.json()['run_id']}/events",
                        headers={**headers, "accept": "application/json"}).json()
    [final] = [e["data"] for e in events if e["type"] == "final"]
    return final


def cited(final: dict, sentence: str) -> list[str]:
    """The documents a sentence's markers name, in order."""
    return [final["citations"][n - 1]["document_id"] for n in marker_numbers(sentence)]


def test_the_running_example_opens_with_the_verdict_and_its_cited_comparisons(deployment):
    home, client = deployment
    final = final_of(client, home)
    assert final["path"] == "agentic" and final["missing"] == []
    first = split_claims(final["answer"])[0]
    assert first == ("Acme is eligible for the multi-year discount of up to 12% [1]: annual revenue $740,000 ≥ "
                     "$500,000 [2][3]; customer tenure since 15 January 2023, 3 years 10 months by 1 December 2026 "
                     "(the renewal next month) ≥ 2 years [4][3].")
    # the grant and each threshold cite the rule, each fact the document that states it
    assert cited(final, first) == ["discount-policy-2026", "acme-account-facts", "discount-policy-2026", "acme-msa",
                                   "discount-policy-2026"]
    assert [c["heading"].rsplit(" > ", 1)[-1] for c in final["citations"][:4]] == [
        "3.3 Discount", "Revenue", "3.2 Eligibility", "Term and renewal"]


def test_with_the_agreement_withdrawn_it_opens_with_the_conditional(deployment):
    home, client = deployment
    withdrawn = client.post("/v1/admin/tenants/northwind/documents/acme-msa/withdraw", headers=home.admin_headers())
    assert withdrawn.status_code == 200, withdrawn.text
    final = final_of(client, home)
    first = split_claims(final["answer"])[0]
    assert first == ("If Acme's customer tenure began on or before 1 December 2024, 2 years before 1 December 2026 "
                     "(the renewal next month) [1], Acme is eligible for the multi-year discount of up to 12% [2]: "
                     "annual revenue $740,000 ≥ $500,000 [3][1].")
    assert cited(final, first) == ["discount-policy-2026", "discount-policy-2026", "acme-account-facts",
                                   "discount-policy-2026"]
    assert "acme-msa" not in {c["document_id"] for c in final["citations"]}
    assert [m.split(" (")[0] for m in final["missing"]] == ["Acme: Customer tenure"]
    # no sentence states a verdict the evidence does not carry
    assert not [c for c in split_claims(final["answer"]) if c.startswith("Acme is") or "not eligible" in c]
