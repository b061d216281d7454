"""A rule the catalog names as a policy decides an eligibility question only when its policy id,
resolved for the caller (the catalog, not a search), is that very document version: no policy match
never means eligible. Sources are the Northwind running example's, built by hand (tests/unit/test_decision.py)."""

from __future__ import annotations

import dataclasses

from citadel.agent.decision import ELIGIBLE, decide, rule_is_current
from citadel.prompting.source import Source
from citadel.types import Governance
from tests.unit.test_decision import QUESTION, TODAY, sources

POLICY = Governance(policy_id="NW-DISC", policy_revision="2026", sensitivity="internal")


def governed(numbered: list[Source]) -> list[Source]:
    """The same sources with the rule's document governed as policy NW-DISC (as its chunks carry it)."""
    return [dataclasses.replace(s, passage=dataclasses.replace(s.passage, governance=POLICY))
            if s.passage.document_id == "discount-policy-2026" else s for s in numbered]


def test_a_rule_that_is_its_policy_s_current_readable_revision_decides():
    decision = decide(QUESTION, governed(sources()), TODAY,
                      policies={"NW-DISC": ("discount-policy-2026", 1)}.get)
    assert decision is not None and decision.verdict == ELIGIBLE


def test_no_policy_match_never_means_eligible():
    numbered = governed(sources())
    # the id resolves to nothing for this caller (unreadable, withdrawn, unknown), or no lookup is wired
    assert decide(QUESTION, numbered, TODAY, policies=lambda policy_id: None) is None
    assert decide(QUESTION, numbered, TODAY) is None
    # the id's current approved revision is another version or document than the rule search found
    assert decide(QUESTION, numbered, TODAY, policies={"NW-DISC": ("discount-policy-2026", 2)}.get) is None
    assert decide(QUESTION, numbered, TODAY, policies={"NW-DISC": ("discount-policy-2027", 1)}.get) is None


def test_a_rule_no_policy_id_names_is_read_as_found():
    plain = sources()
    assert rule_is_current(plain[1].passage, None)
    assert decide(QUESTION, plain, TODAY).verdict == ELIGIBLE
