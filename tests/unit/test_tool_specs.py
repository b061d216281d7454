"""The tool registry from YAML: the running example loads; every kind of bad spec is
refused at load with an error naming the tool and the field."""

from __future__ import annotations

import copy

import pytest
import yaml
from pydantic import ValidationError

from citadel.tools.spec import (
    DEFAULT_AUDIT_SHARE,
    MAX_REGISTRY_BYTES,
    InvalidToolSpec,
    RiskTier,
    ToolSpec,
    load_tool_specs,
    parse_tool_specs,
)

# The running example's three tools (Northwind's CRM). The lead places the real file; this is the same
# registry, inline, so the tests own their data.
CRM_TOOLS_YAML = """
tools:
  - name: crm.get_account
    description: Read one CRM account (name, tier, tenure, open approvals).
    risk_tier: T0
    args_schema:
      type: object
      additionalProperties: false
      required: [account_id]
      properties:
        account_id: {type: string, pattern: "^[A-Za-z0-9_-]{1,64}$"}
    response_schema:
      type: object
      required: [account_id, name]
      properties:
        account_id: {type: string}
        name: {type: string}
        tenure_months: {type: integer, minimum: 0}
  - name: crm.add_note
    description: Add a note to a CRM account.
    risk_tier: T1
    args_schema:
      type: object
      additionalProperties: false
      required: [account_id, text]
      properties:
        account_id: {type: string, pattern: "^[A-Za-z0-9_-]{1,64}$"}
        text: {type: string, minLength: 1, maxLength: 2000}
  - name: crm.create_discount_approval
    description: Create a discount approval for an account (commits money).
    risk_tier: T2
    approver_group: deal-desk
    lead_group: sales-directors
    approver_limit: {discount_pct: 15}
    escalate_after_s: 3600
    expire_after_s: 86400
    write_groups: [sales]
    args_schema:
      type: object
      additionalProperties: false
      required: [account_id, discount_pct, term_months]
      properties:
        account_id: {type: string, pattern: "^[A-Za-z0-9_-]{1,64}$"}
        discount_pct: {type: number, minimum: 0, maximum: 100}
        term_months: {type: integer, minimum: 1, maximum: 120}
    response_schema:
      type: object
      required: [approval_id, external_id]
      properties:
        approval_id: {type: string}
        external_id: {type: string}
"""

GET, NOTE, DISCOUNT = "crm.get_account", "crm.add_note", "crm.create_discount_approval"


def crm_tools() -> dict:
    return yaml.safe_load(CRM_TOOLS_YAML)


def tool(data: dict, name: str) -> dict:
    return next(entry for entry in data["tools"] if entry["name"] == name)


def refused(data: dict) -> InvalidToolSpec:
    with pytest.raises(InvalidToolSpec) as caught:
        parse_tool_specs(yaml.safe_dump(data), source="tools.yaml")
    return caught.value


# ---------------------------------------------------------------------- a good registry
def test_the_running_example_loads_from_a_file(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text(CRM_TOOLS_YAML)
    specs = load_tool_specs(path)
    assert list(specs) == [GET, NOTE, DISCOUNT]
    assert [spec.risk_tier for spec in specs.values()] == [RiskTier.T0, RiskTier.T1, RiskTier.T2]
    discount = specs[DISCOUNT]
    assert discount.approver_group == "deal-desk" and discount.lead_group == "sales-directors"
    assert discount.approver_limit == {"discount_pct": 15.0}
    assert (discount.escalate_after_s, discount.expire_after_s) == (3600.0, 86400.0)
    assert discount.write_groups == frozenset({"sales"})
    assert specs[NOTE].audit_share == DEFAULT_AUDIT_SHARE == 0.05
    assert specs[GET].response_schema["required"] == ["account_id", "name"]


def test_a_spec_is_immutable():
    spec = parse_tool_specs(CRM_TOOLS_YAML)[DISCOUNT]
    with pytest.raises(ValidationError):
        spec.approver_limit = {}  # type: ignore[misc]


def test_a_single_word_name_like_search_is_a_tool_name():
    data = crm_tools()
    tool(data, GET)["name"] = "search"
    assert "search" in parse_tool_specs(yaml.safe_dump(data))


# ---------------------------------------------------------------------- bad specs, each named
def _set(name, field, value):
    def change(data):
        tool(data, name)[field] = value
    return change


def _drop(name, field):
    def change(data):
        del tool(data, name)[field]
    return change


def _schema(name, **changes):
    def change(data):
        schema = tool(data, name)["args_schema"]
        for key, value in changes.items():
            if value is None:
                schema.pop(key, None)
            else:
                schema[key] = value
    return change


def _property(name, prop, value):
    def change(data):
        tool(data, name)["args_schema"]["properties"][prop] = value
    return change


BAD_SPECS = [
    # (what, change, tool, field, a fragment of the problem)
    ("upper-case name", _set(GET, "name", "CRM.GetAccount"), "CRM.GetAccount", "name", "lower-case"),
    ("name with a space", _set(GET, "name", "crm get"), "crm get", "name", "lower-case"),
    ("reserved name", _set(GET, "name", "model"), "model", "name", "reserved"),
    ("no description", _drop(NOTE, "description"), NOTE, "description", "required"),
    ("unknown setting", _set(NOTE, "approvers", ["x"]), NOTE, "approvers", "not a tool setting"),
    ("unknown tier", _set(NOTE, "risk_tier", "T3"), NOTE, "risk_tier", "T0"),
    ("extra properties allowed", _schema(NOTE, additionalProperties=True), NOTE, "args_schema",
     "additionalProperties: false"),
    ("additionalProperties left out", _schema(NOTE, additionalProperties=None), NOTE, "args_schema",
     "additionalProperties: false"),
    ("a nested open object", _property(NOTE, "meta", {"type": "object"}), NOTE, "args_schema",
     "#/properties/meta"),
    ("not an object schema", _schema(NOTE, type="array"), NOTE, "args_schema", '"type": "object"'),
    ("not a JSON Schema", _property(NOTE, "text", {"type": "strin"}), NOTE, "args_schema",
     "not a valid JSON Schema"),
    ("patternProperties", _schema(NOTE, patternProperties={"^x_": {"type": "string"}}), NOTE, "args_schema",
     "patternProperties"),
    ("a remote $ref", _property(NOTE, "text", {"$ref": "https://example.com/s.json"}), NOTE, "args_schema",
     "local references"),
    ("a pattern RE2 cannot run", _property(NOTE, "text", {"type": "string", "pattern": r"(a)\1"}), NOTE,
     "args_schema", "RE2"),
    ("required names an undeclared argument", _schema(NOTE, required=["account_id", "body"]), NOTE,
     "args_schema", "body"),
    ("a bad response schema", _set(GET, "response_schema", {"type": 5}), GET, "response_schema",
     "not a valid JSON Schema"),
    ("T2 without an approver group", _drop(DISCOUNT, "approver_group"), DISCOUNT, "approver_group",
     "approves"),
    ("T2 without expiry", _drop(DISCOUNT, "expire_after_s"), DISCOUNT, "expire_after_s", "above 0"),
    ("T2 with zero escalation", _set(DISCOUNT, "escalate_after_s", 0), DISCOUNT, "escalate_after_s", "above 0"),
    ("escalation after expiry", _set(DISCOUNT, "escalate_after_s", 90000), DISCOUNT, "escalate_after_s",
     "shorter than expire_after_s"),
    ("expiry in years", _set(DISCOUNT, "expire_after_s", 10**9), DISCOUNT, "expire_after_s", "at most"),
    ("escalation on a T1", _set(NOTE, "escalate_after_s", 60), NOTE, "escalate_after_s", "only T2"),
    ("a lead group on a T1", _set(NOTE, "lead_group", "leads"), NOTE, "lead_group", "only T2"),
    ("audit share above 1", _set(NOTE, "audit_share", 1.5), NOTE, "audit_share", "1"),
    ("audit share on a T2", _set(DISCOUNT, "audit_share", 0.1), DISCOUNT, "audit_share", "only T1"),
    ("a boolean audit share", _set(NOTE, "audit_share", True), NOTE, "audit_share", "number"),
    ("a limit on no argument", _set(DISCOUNT, "approver_limit", {"max_discount_pct": 15}), DISCOUNT,
     "approver_limit", "'max_discount_pct' is not an argument"),
    ("a limit on a text argument", _set(DISCOUNT, "approver_limit", {"account_id": 15}), DISCOUNT,
     "approver_limit", "number or integer"),
    ("a boolean limit", _set(DISCOUNT, "approver_limit", {"discount_pct": True}), DISCOUNT,
     "approver_limit.discount_pct", "number"),
    ("write groups on a read", _set(GET, "write_groups", ["sales"]), GET, "write_groups", "T0"),
    ("an empty group name", _set(DISCOUNT, "approver_group", ""), DISCOUNT, "approver_group", "at least 1"),
    ("a group name with a newline", _set(DISCOUNT, "write_groups", ["sales\nadmins"]), DISCOUNT, "write_groups",
     "control characters"),
]


@pytest.mark.parametrize("what,change,name,field,fragment", BAD_SPECS, ids=[case[0] for case in BAD_SPECS])
def test_a_bad_spec_is_refused_naming_the_tool_and_the_field(what, change, name, field, fragment):
    data = crm_tools()
    change(data)
    error = refused(data)
    assert error.tool == name
    assert error.field is not None and error.field.startswith(field)
    assert fragment in error.problem
    assert str(error).startswith(f"tools.yaml: tool {name!r}: {error.field}:")
    assert error.code == "invalid_tool_spec"


def test_every_other_tool_of_a_refused_file_was_fine():
    """The cases above each break exactly one thing: the untouched example loads."""
    assert len(parse_tool_specs(yaml.safe_dump(crm_tools()))) == 3


def test_a_duplicate_name_is_refused():
    data = crm_tools()
    data["tools"].append(copy.deepcopy(tool(data, NOTE)))
    error = refused(data)
    assert (error.tool, error.field) == (NOTE, "name") and "twice" in error.problem


def test_a_tool_without_a_usable_name_is_named_by_position():
    data = crm_tools()
    del tool(data, NOTE)["name"]
    error = refused(data)
    assert (error.tool, error.field) == ("#2", "name")


# ---------------------------------------------------------------------- bad files
@pytest.mark.parametrize("text,fragment", [
    ("", "exactly one key"),
    ("- just a list\n", "exactly one key"),
    ("tools: []\n", "non-empty list"),
    ("tools: {a: 1}\n", "non-empty list"),
    ("tools: [1]\n", "tool #1 must be a mapping"),
    ("tools: []\nextra: 1\n", "exactly one key"),
    ("tools: [\n", "not valid YAML"),
    ("base: &b {type: object}\ntools: [*b]\n", "aliases"),
    ("tools: " + "[" * 5000 + "]" * 5000, "nested too deeply"),  # never a RecursionError
])
def test_a_bad_file_is_refused(text, fragment):
    with pytest.raises(InvalidToolSpec) as caught:
        parse_tool_specs(text, source="tools.yaml")
    assert fragment in str(caught.value)
    assert str(caught.value).startswith("tools.yaml:")


def test_a_file_over_the_size_bound_is_refused_before_parsing(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text(CRM_TOOLS_YAML + "#" * MAX_REGISTRY_BYTES)
    with pytest.raises(InvalidToolSpec, match="larger than"):
        load_tool_specs(path)


def test_a_missing_or_binary_file_is_refused(tmp_path):
    with pytest.raises(InvalidToolSpec, match="cannot be read"):
        load_tool_specs(tmp_path / "absent.yaml")
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"tools: [\xff]")
    with pytest.raises(InvalidToolSpec, match="UTF-8"):
        load_tool_specs(path)


def test_a_spec_built_in_code_is_checked_the_same_way():
    data = tool(crm_tools(), DISCOUNT)
    data["escalate_after_s"] = 86400
    with pytest.raises(ValidationError, match="shorter than expire_after_s"):
        ToolSpec.model_validate(data)
