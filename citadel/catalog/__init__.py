"""The catalog: the live source of truth for documents, versions, ACLs and published partitions."""

from citadel.catalog.base import Catalog, DocumentRecord, ReadableDoc
from citadel.catalog.sqlite import SQLiteCatalog

__all__ = ["Catalog", "DocumentRecord", "ReadableDoc", "SQLiteCatalog"]
