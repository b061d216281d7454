"""Reviewer honeypots: the seeded planting rate, wrong arguments built from the
tool's policy that still pass its schema, decoy accounts, and what a planted approval carries."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from citadel.config import ToolsConfig
from citadel.tools.approvals import Approval, ApprovalStatus, MemoryApprovalStore
from citadel.tools.honeypots import (
    BUMP_MAX,
    BUMP_MIN,
    HONEYPOT_RUN_PREFIX,
    HoneypotPlanter,
    is_honeypot_run,
    shown_run_id,
)
from citadel.tools.schema import validator_for
from citadel.tools.spec import ToolSpec, load_tool_specs

REPO = Path(__file__).resolve().parents[2]
SPECS = load_tool_specs(REPO / "examples" / "crm" / "tools.yaml")
DISCOUNT = SPECS["crm.create_discount_approval"]
PROPOSAL = {"account_id": "acme", "discount_pct": 12, "term_months": 24}


def real(approval_id: str = "a1", args: dict | None = None, spec: ToolSpec = DISCOUNT) -> Approval:
    return Approval(approval_id, "northwind", "run-1", "s1", spec.name, "sam", dict(args or PROPOSAL),
                    spec.approver_group or "deal-desk", spec.lead_group, 3_600.0, 86_400.0, created_at=5.0)


def valid(spec: ToolSpec, args: dict) -> bool:
    return validator_for(spec.args_schema).is_valid(args)


def tool(approver_limit: dict | None = None, **properties: dict) -> ToolSpec:
    return ToolSpec.model_validate({
        "name": "billing.refund", "description": "Refund", "risk_tier": "T2", "approver_group": "finance",
        "escalate_after_s": 60, "expire_after_s": 600, "approver_limit": approver_limit or {},
        "args_schema": {"type": "object", "additionalProperties": False, "required": sorted(properties),
                        "properties": properties}})


# ---------------------------------------------------------------------- the rate
def test_the_rate_is_met_within_a_binomial_bound_and_reproducible_with_a_seed():
    draws, rate = 20_000, 0.01
    planter = HoneypotPlanter(rate, seed=42)
    planted = [a for a in (planter.maybe_plant(real(f"approval-{i}"), DISCOUNT) for i in range(draws)) if a]
    sd = math.sqrt(draws * rate * (1 - rate))  # 14.07
    assert abs(len(planted) - draws * rate) <= 4 * sd, len(planted)
    again = HoneypotPlanter(rate, seed=42)
    replanted = [a for a in (again.maybe_plant(real(f"approval-{i}"), DISCOUNT) for i in range(draws)) if a]
    assert replanted == planted  # same approvals, same args, same synthetic runs
    other = [a for a in (HoneypotPlanter(rate, seed=43).maybe_plant(real(f"approval-{i}"), DISCOUNT)
                         for i in range(draws)) if a]
    assert {a.run_id for a in other} != {a.run_id for a in planted}


def test_the_same_approval_gets_the_same_answer_in_any_order_and_from_any_thread():
    planter = HoneypotPlanter(0.5, seed=3)
    ids = [f"approval-{i}" for i in range(200)]
    forward = {i: planter.maybe_plant(real(i), DISCOUNT) for i in ids}
    backward = {i: planter.maybe_plant(real(i), DISCOUNT) for i in reversed(ids)}
    assert forward == backward
    threaded: dict[str, Approval | None] = {}

    def plant(chunk: list[str]) -> None:
        for approval_id in chunk:
            threaded[approval_id] = planter.maybe_plant(real(approval_id), DISCOUNT)

    workers = [threading.Thread(target=plant, args=(ids[k::4],)) for k in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert threaded == forward


def test_rate_zero_never_plants_and_rate_one_always_does():
    never = HoneypotPlanter(0.0, seed=1)
    assert all(never.maybe_plant(real(f"a{i}"), DISCOUNT) is None for i in range(5_000))
    always = HoneypotPlanter(1.0, seed=1)
    assert all(always.maybe_plant(real(f"a{i}"), DISCOUNT) is not None for i in range(500))


@pytest.mark.parametrize("rate", [-0.1, 1.5, float("nan"), True, "0.1"])
def test_a_rate_outside_zero_to_one_is_refused(rate):
    with pytest.raises(ValueError):
        HoneypotPlanter(rate)


# ---------------------------------------------------------------------- what is planted
def test_a_honeypot_is_a_new_pending_twin_of_the_real_request_flagged_and_on_no_real_run():
    original = real("a1")
    planted = HoneypotPlanter(1.0, seed=9).maybe_plant(original, DISCOUNT)
    assert planted.honeypot and planted.approval_id == "" and planted.status is ApprovalStatus.PENDING
    assert (planted.tenant_id, planted.tool, planted.requester, planted.approver_group, planted.lead_group) == \
        (original.tenant_id, original.tool, original.requester, original.approver_group, original.lead_group)
    assert (planted.escalate_at, planted.expire_at) == (original.escalate_at, original.expire_at)
    assert planted.step_id == original.step_id and is_honeypot_run(planted.run_id)
    hex_part = planted.run_id.removeprefix(HONEYPOT_RUN_PREFIX)
    assert len(hex_part) == 32 and hex_part[12] == "4"  # reads like a run id (uuid4 hex)
    assert shown_run_id(planted) == hex_part and shown_run_id(original) == "run-1"
    assert planted.proposed_args != original.proposed_args and valid(DISCOUNT, planted.proposed_args)
    # stored like any request: a store assigns the id; asking again (a resumed run) stores nothing new
    store = MemoryApprovalStore(lambda: 10.0)
    stored = store.request(planted)
    again = store.request(HoneypotPlanter(1.0, seed=9).maybe_plant(original, DISCOUNT))
    assert again.approval_id == stored.approval_id and stored.honeypot
    assert store.get(stored.approval_id).proposed_args == planted.proposed_args


def test_no_honeypot_of_a_honeypot_and_the_real_approval_must_be_stored_first():
    planter = HoneypotPlanter(1.0, seed=1)
    planted = planter.maybe_plant(real("a1"), DISCOUNT)
    assert planter.maybe_plant(planted.__class__(**{**planted.__dict__, "approval_id": "h1"}), DISCOUNT) is None
    with pytest.raises(ValueError):
        planter.maybe_plant(real(""), DISCOUNT)
    with pytest.raises(ValueError):
        planter.maybe_plant(real("a1"), SPECS["crm.add_note"])


def test_the_wrong_args_break_the_limit_by_a_seeded_margin_and_pass_the_schema():
    planter = HoneypotPlanter(1.0, seed=5)
    seen = set()
    for i in range(300):
        args = planter.maybe_plant(real(f"a{i}"), DISCOUNT).proposed_args
        assert valid(DISCOUNT, args)
        assert args["account_id"] == "acme" and args["term_months"] == 24  # one thing wrong: the discount
        assert isinstance(args["discount_pct"], int)  # an integral limit gives a plain number: 22, not 22.0
        assert 15 + BUMP_MIN <= args["discount_pct"] <= 15 + BUMP_MAX
        seen.add(args["discount_pct"])
    assert seen == set(range(15 + BUMP_MIN, 15 + BUMP_MAX + 1))


def test_a_schema_with_little_room_above_the_limit_still_gets_a_value_above_it():
    tight = tool({"amount": 98.5}, amount={"type": "number", "minimum": 0, "maximum": 100})
    for i in range(50):
        args = HoneypotPlanter(1.0, seed=i).maybe_plant(real("a1", {"amount": 40}, tight), tight).proposed_args
        assert 98.5 < args["amount"] <= 100 and valid(tight, args)
    integer = tool({"count": 7}, count={"type": "integer", "maximum": 8})
    args = HoneypotPlanter(1.0, seed=1).maybe_plant(real("a1", {"count": 2}, integer), integer).proposed_args
    assert args == {"count": 8}
    stepped = tool({"amount": 10}, amount={"type": "number", "multipleOf": 5})
    args = HoneypotPlanter(1.0, seed=1).maybe_plant(real("a1", {"amount": 5}, stepped), stepped).proposed_args
    assert args["amount"] in (15, 20) and valid(stepped, args)


def test_without_a_usable_limit_the_schema_maximum_is_the_wrong_value_and_else_nothing_is_planted():
    no_room = tool({"amount": 100}, amount={"type": "number", "maximum": 100},
                   months={"type": "integer", "minimum": 1, "maximum": 60})
    args = HoneypotPlanter(1.0, seed=2).maybe_plant(real("a1", {"amount": 10, "months": 12}, no_room),
                                                    no_room).proposed_args
    assert args == {"amount": 10, "months": 60}  # the limit leaves no room: the extreme term instead
    plain = tool(note={"type": "string", "maxLength": 100})
    assert HoneypotPlanter(1.0, seed=2).maybe_plant(real("a1", {"note": "hi"}, plain), plain) is None
    at_the_top = tool(months={"type": "integer", "maximum": 60})
    assert HoneypotPlanter(1.0, seed=2).maybe_plant(real("a1", {"months": 60}, at_the_top), at_the_top) is None


# ---------------------------------------------------------------------- decoy accounts
def test_decoy_accounts_replace_the_customer_and_nothing_else():
    planter = HoneypotPlanter(1.0, seed=11, decoy_accounts=["globex"])
    kinds = {"decoy": 0, "limit": 0}
    for i in range(400):
        args = planter.maybe_plant(real(f"a{i}"), DISCOUNT).proposed_args
        assert valid(DISCOUNT, args)
        if args["account_id"] == "globex":
            assert args["discount_pct"] == 12 and args["term_months"] == 24
            kinds["decoy"] += 1
        else:
            assert args["account_id"] == "acme" and args["discount_pct"] > 15
            kinds["limit"] += 1
    assert 120 <= kinds["decoy"] <= 280  # decoy_share 0.5 of 400: well within 8 standard deviations


def test_a_decoy_is_never_the_real_account_and_must_fit_the_schema():
    planter = HoneypotPlanter(1.0, seed=4, decoy_accounts=["globex", "not a valid id!", "initech"], decoy_share=1.0)
    for i in range(100):
        args = planter.maybe_plant(real(f"a{i}", {**PROPOSAL, "account_id": "globex"}), DISCOUNT).proposed_args
        assert args["account_id"] == "initech"  # globex is the real customer, the other fails the pattern
    only_itself = HoneypotPlanter(1.0, seed=4, decoy_accounts=["globex"], decoy_share=1.0)
    args = only_itself.maybe_plant(real("a1", {**PROPOSAL, "account_id": "globex"}), DISCOUNT).proposed_args
    assert args["account_id"] == "globex" and args["discount_pct"] > 15  # falls back to the limit
    note_tool = tool(text={"type": "string"})  # no account_id: decoys do not apply
    assert HoneypotPlanter(1.0, seed=4, decoy_accounts=["globex"], decoy_share=1.0).maybe_plant(
        real("a1", {"text": "x"}, note_tool), note_tool) is None


def test_the_planter_reads_its_config():
    config = ToolsConfig(honeypot_rate=0.25, honeypot_seed=8, honeypot_decoy_accounts=["globex"])
    planter = HoneypotPlanter.from_config(config)
    assert (planter.rate, planter.decoy_accounts) == (0.25, ("globex",))
    assert ToolsConfig().honeypot_rate == 0.01
    with pytest.raises(ValueError):
        ToolsConfig(honeypot_rate=2)
    with pytest.raises(ValueError):
        HoneypotPlanter(0.1, decoy_accounts="globex")
