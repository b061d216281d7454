"""Withdrawing a document deletes it (DESIGN.md §3).

Eligibility goes first, then the copies, so no query sees the document in between:
1. the catalog marks it withdrawn (audited): from here on no retrieval, no cached answer (a hit is
   live-checked) and no conversation summary line serves it;
2. the answer-cache entries citing it are dropped (the caller's cache: in process or Redis);
3. its chunk text, vectors and BM25 postings leave the partition files: a publish without its rows,
   and every older segment deleted (Ingestor.expunge). Verified afterwards: no segment on disk holds
   a row of it, by its id or by any chunk id of the catalog's per-version manifests;
4. its raw files are deleted, every version's, from the object store (citadel/ingest/uploads.py), and
   any upload of the older layout under the home;
5. the answer-log rows citing it are deleted, question and answer (an answer quotes its source),
   and so are the candidate test items whose answer cites it (citadel/quality/candidates.py),
   overwritten in the SQLite file rather than left in free pages or the WAL;
6. what went is audited (`withdrawal_deleted`).

What stays, on purpose: the catalog's record of the document and its versions (status, title,
content hash, chunk ids: the audit trail and what keeps versions monotonic; no text), feedback rows
(votes naming document ids), and users' own conversations and runs: what a user was shown stays in
their history until `agent.retention_days` or `DELETE /v1/me/data` (their context is live-checked,
so lines citing it are no longer used). A crash after step 1 leaves the document unreadable;
withdrawing it again finishes the deletion (every step is idempotent).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Protocol

from citadel.catalog.base import Catalog
from citadel.errors import VerificationFailed
from citadel.ingest.objects import ObjectStore
from citadel.ingest.uploads import delete_legacy_uploads, delete_raw
from citadel.segments.expunge import segments_holding


class Expunger(Protocol):
    """What deletes a withdrawn document's rows from the partition (citadel.ingest.local.Ingestor)."""

    def expunge(self, tenant_id: str, document_id: str): ...


@dataclass(frozen=True)
class WithdrawalReport:
    tenant_id: str
    document_id: str
    status: str
    segment_id: str | None  # the partition published without it (None: nothing to rewrite)
    raw_files_deleted: int
    answers_forgotten: int

    def to_dict(self) -> dict:
        return asdict(self)


def withdraw_document(catalog: Catalog, expunger: Expunger, home: Path, partitions_dir: Path, tenant_id: str,
                      document_id: str, actor: str,
                      invalidate_cache: Callable[[str, list[str]], None] | None = None,
                      objects: ObjectStore | None = None) -> WithdrawalReport:
    """Withdraw the document and delete every copy of its text under the home and in `objects`
    (the raw files' store; the steps above). NotFound for an unknown document, VerificationFailed if
    a segment still holds it afterwards."""
    catalog.withdraw(tenant_id, document_id, actor)
    if invalidate_cache is not None:
        invalidate_cache(tenant_id, [document_id])
    job = expunger.expunge(tenant_id, document_id)
    _verify_gone(catalog, partitions_dir, tenant_id, document_id)
    report = WithdrawalReport(tenant_id, document_id, "withdrawn", getattr(job, "segment_id", None),
                              _delete_raw_files(home, catalog, objects, tenant_id, document_id),
                              catalog.forget_answers_citing(tenant_id, document_id))
    catalog.audit(actor, "withdrawal_deleted", tenant_id, document_id,
                  {k: v for k, v in report.to_dict().items() if k not in ("tenant_id", "document_id")})
    return report


def _delete_raw_files(home: Path, catalog: Catalog, objects: ObjectStore | None, tenant_id: str,
                      document_id: str) -> int:
    deleted = delete_legacy_uploads(home, catalog, tenant_id, document_id)
    return deleted + (delete_raw(objects, tenant_id, document_id) if objects is not None else 0)


def _verify_gone(catalog: Catalog, partitions_dir: Path, tenant_id: str, document_id: str) -> None:
    holding = segments_holding(partitions_dir, tenant_id, document_id,
                               catalog.document_chunk_ids(tenant_id, document_id))
    if holding:
        raise VerificationFailed(f"document {document_id!r} of tenant {tenant_id!r} is withdrawn but still "
                                 f"held by {len(holding)} segment(s); withdraw it again to finish the deletion")
