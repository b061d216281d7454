"""An agentic run's eligibility decision reads its rule's policy by id through the catalog (over HTTP,
the Northwind running example): while the rule is its policy's current approved revision that the
user may read, the answer opens with the verdict; once a newer revision of the policy is published
that the user may not read, the rule found by search decides nothing — no verdict, not the older one."""

from __future__ import annotations

import pytest

from citadel.answer.validator import split_claims
from tests.integration.conftest import EXAMPLES, make_home
from tests.integration.test_api import client_for
from tests.integration.test_decision_api import NOW, final_of
from tests.settable_clock import SettableClock

ACL = """default: [sales, finance]
documents:
  margin-model: [finance]
  discount-policy-2027: [finance]
governance:
  discount-policy-2026: {policy_id: NW-DISC, policy_revision: "2026", sensitivity: internal}
  discount-policy-2027: {policy_id: NW-DISC, policy_revision: "2027", sensitivity: internal}
"""
NEXT_REVISION = """# Northwind Discount Policy 2027 (draft for finance)

## 1 Standard discount

Sales representatives may offer a standard discount of up to 8% on annual contracts.
"""


@pytest.fixture
def deployment(tmp_path):
    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.embedding.factory import make_embedder
    from citadel.ingest.local import Ingestor
    from citadel.ingest.sources import AclSpec, discover

    home = make_home(tmp_path / "home")
    (tmp_path / "acl.yaml").write_text(ACL)
    acl = AclSpec.from_file(tmp_path / "acl.yaml")
    catalog = SQLiteCatalog(home.config.catalog_path)
    ingestor = Ingestor(catalog, make_embedder(home.config.embedding), home.config)
    ingestor.ingest("northwind", discover([EXAMPLES / "northwind"], trust_front_matter=True), acl)

    def publish_next_revision() -> None:
        (tmp_path / "next").mkdir()
        (tmp_path / "next" / "discount-policy-2027.md").write_text(NEXT_REVISION)
        ingestor.ingest("northwind", discover([tmp_path / "next"]), acl)

    with client_for(home, clock=SettableClock(NOW)) as client:
        yield home, client, publish_next_revision
        client.app.state.services.runs.wait_for_runs(60)
    catalog.close()


def test_the_verdict_stands_only_while_the_rule_is_its_policy_s_current_readable_revision(deployment):
    home, client, publish_next_revision = deployment
    first = split_claims(final_of(client, home)["answer"])[0]
    assert first.startswith("Acme is eligible for the multi-year discount of up to 12% [1]")
    publish_next_revision()  # NW-DISC's current revision is now 2027, which sales may not read
    sam = {"tenant": "northwind", "user": "sam", "groups": ("sales",), "now": NOW}
    assert client.get("/v1/policies/NW-DISC", headers=home.headers(**sam)).status_code == 404
    final = final_of(client, home)
    # no decision at all: neither a verdict nor the conditional that would state one
    assert "Acme is eligible" not in final["answer"] and "not eligible" not in final["answer"], final["answer"]
    assert "discount-policy-2027" not in {c["document_id"] for c in final["citations"]}
