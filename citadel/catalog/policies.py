"""A policy resolved by its id: the current approved revision, for a caller who may read it now.

A document the catalog's governance names as a policy (citadel.types.Governance.policy_id) is found
by that id, not by searching its text: the tenant's published document carrying the id is its current
approved revision (GovernanceRegistry.current_policy), and it resolves only for a principal the live
permission check lets read that very version. Anything else — no such policy, a withdrawn or
superseded one, one the caller's groups cannot read — resolves to None, which callers treat as "no
policy": never as access granted or a rule met (an older revision the caller can read is not
offered in its place). `GET /v1/policies/{id}` and the agent's decisions read it.
"""

from __future__ import annotations

from typing import Protocol

from citadel.catalog.base import DocumentRecord, GovernanceRegistry, PermissionSource
from citadel.types import Principal

MAX_POLICY_ID_CHARS = 128


class PolicySource(PermissionSource, GovernanceRegistry, Protocol):
    """What resolving a policy reads: the live permission check and the governance registry."""


def resolve_policy(catalog: PolicySource, principal: Principal, policy_id: str) -> DocumentRecord | None:
    """The current approved revision of the policy, when `principal` may read it now; else None."""
    if not policy_id or len(policy_id) > MAX_POLICY_ID_CHARS or not policy_id.isprintable():
        return None
    current = catalog.current_policy(principal.tenant_id, policy_id)
    if current is None:
        return None
    readable = catalog.readable_documents(principal).get(current.document_id)
    if readable is None or readable.version != current.published_version:
        return None
    return current
