"""The cache key's ACL signature keeps group names apart: joining them with an unescaped comma did not.

`",".join(sorted(groups))` made a principal in the one group "a,b" share a signature, and so every
cached answer, with a principal in the two groups "a" and "b": the first could be served answers
computed for documents only the second may read. The signature and the answer-cache key now hash a
canonical, unambiguous encoding (a JSON list), so different group sets never share a key.
"""

from __future__ import annotations

import pytest

from citadel.state.base import answer_cache_key
from citadel.types import Principal

QUESTION = "What is the hotel limit?"

# Pairs of group sets that a separator-joined encoding confuses.
AMBIGUOUS = [
    ({"a,b"}, {"a", "b"}),
    ({"a,b", "c"}, {"a", "b,c"}),
    ({"a|b"}, {"a", "b"}),
    ({"x\",\"y"}, {"x", "y"}),
    ({""}, set()),
    ({"", "a"}, {"a"}),
]


@pytest.mark.parametrize("left, right", AMBIGUOUS, ids=repr)
def test_group_sets_that_join_alike_get_different_signatures_and_keys(left, right):
    one = Principal("acme", "alice", frozenset(left))
    other = Principal("acme", "bob", frozenset(right))
    assert one.acl_signature != other.acl_signature
    assert (answer_cache_key("acme", one.acl_signature, QUESTION, "seg-1")
            != answer_cache_key("acme", other.acl_signature, QUESTION, "seg-1"))


def test_the_tenant_cannot_be_spelled_into_the_groups():
    # "t|a" + groups {} versus "t" + groups {"a"} under a `tenant + "|" + groups` encoding
    assert (Principal("t", "u", frozenset({"x"})).acl_signature
            != Principal("t", "u", frozenset({"x", ""})).acl_signature)
    assert Principal("t", "u", frozenset()).acl_signature != Principal("u", "u", frozenset()).acl_signature


def test_the_signature_depends_on_the_set_not_its_order_or_the_user():
    assert (Principal("acme", "alice", frozenset({"b", "a"})).acl_signature
            == Principal("acme", "bob", frozenset({"a", "b"})).acl_signature)


@pytest.mark.parametrize("fields", [
    (("a", "b"), ("a|b", "")),
    (("a", "b c"), ("a b", "c")),
], ids=repr)
def test_the_key_keeps_its_fields_apart(fields):
    (tenant_1, sig_1), (tenant_2, sig_2) = fields
    assert answer_cache_key(tenant_1, sig_1, QUESTION, "s") != answer_cache_key(tenant_2, sig_2, QUESTION, "s")
