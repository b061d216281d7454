"""The documents endpoint family: a citation's section opened, a policy resolved by its id.

Both read for the verified caller only, through the live permission check (citadel/answer/sections.py,
citadel/catalog/policies.py): what the caller may not read now is a 404, the same as what does not
exist.
"""

from __future__ import annotations

from citadel.answer.sections import open_section
from citadel.catalog.policies import PolicySource, resolve_policy
from citadel.errors import NotFound
from citadel.retrieval.partitions import PartitionCache
from serving.services.access import Caller


class DocumentsService:
    def __init__(self, catalog: PolicySource, partitions: PartitionCache):
        self.catalog = catalog
        self.partitions = partitions

    def section(self, caller: Caller, document_id: str, version: int, chunk_id: str,
                quote: str | None = None) -> dict:
        """The cited section (heading path, page, text, the quoted sentence marked when `quote` names it)."""
        return open_section(self.catalog, self.partitions, caller.principal, document_id, version, chunk_id,
                            quote).to_dict()

    def policy(self, caller: Caller, policy_id: str) -> dict:
        """The policy's current approved revision, when the caller may read it."""
        record = resolve_policy(self.catalog, caller.principal, policy_id)
        if record is None:
            raise NotFound(f"no policy {policy_id!r} that you may read")
        return {"policy_id": record.governance.policy_id, "policy_revision": record.governance.policy_revision,
                "document_id": record.document_id, "version": record.published_version, "title": record.title,
                "owner": record.owner, "effective_date": record.effective_date,
                "sensitivity": record.governance.sensitivity, "retention_class": record.governance.retention_class}
