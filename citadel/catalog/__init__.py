"""The catalog: the live source of truth for documents, versions, ACLs and published partitions."""

from citadel.catalog.base import (AnswerLog, AuditLog, CandidateQueue, Catalog, DocumentRecord, JobLog, PermissionSource,
                                  Publisher, ReadableDoc)
from citadel.catalog.sqlite import SQLiteCatalog

__all__ = ["AnswerLog", "AuditLog", "CandidateQueue", "Catalog", "DocumentRecord", "JobLog", "PermissionSource",
           "Publisher", "ReadableDoc", "SQLiteCatalog"]
