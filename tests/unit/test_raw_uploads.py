"""Raw uploads under immutable, versioned keys (citadel/ingest/uploads.py): the key layout, reading a
version's file back, deleting a document's files, and the move of the older `<home>/uploads` layout."""

from __future__ import annotations

import hashlib

import pytest

from citadel.catalog.sqlite import SQLiteCatalog
from citadel.errors import NotFound
from citadel.ingest.objects import LocalObjectStore
from citadel.ingest.uploads import (delete_raw, document_segment, migrate_legacy_uploads, raw_key, read_raw,
                                    store_raw)


@pytest.fixture
def store(tmp_path):
    return LocalObjectStore(tmp_path / "objects")


def test_the_key_names_tenant_document_version_and_the_bytes_hash():
    data = b"%PDF-1.7 ..."
    assert raw_key("acme", "travel-policy", 3, data, ".pdf") == (
        f"raw/acme/travel-policy/v3/{hashlib.sha256(data).hexdigest()}.pdf")


def test_distinct_document_ids_get_distinct_segments():
    ids = ["a/b", "a_b", "a%2Fb", "..", ".", "policy:v2", "Rechnung über"]
    segments = [document_segment(i) for i in ids]
    assert len(set(segments)) == len(ids)
    assert all("/" not in s and s not in (".", "..") for s in segments)


def test_a_version_is_read_back_and_a_withdrawal_deletes_every_version(store):
    store_raw(store, "acme", "memo", 1, b"first", ".md")
    store_raw(store, "acme", "memo", 2, b"second", ".txt")
    store_raw(store, "acme", "memo-2", 1, b"other document", ".md")
    store_raw(store, "acme", "memo", 1, b"first", ".md")  # a retry stores nothing new
    raw = read_raw(store, "acme", "memo", 2)
    assert (raw.content, raw.suffix) == (b"second", ".txt")
    with pytest.raises(NotFound):
        read_raw(store, "acme", "memo", 3)
    assert delete_raw(store, "acme", "memo") == 2
    with pytest.raises(NotFound):
        read_raw(store, "acme", "memo", 1)
    assert read_raw(store, "acme", "memo-2", 1).content == b"other document"


def test_the_older_layout_moves_under_the_versions_its_jobs_published(tmp_path, store):
    catalog = SQLiteCatalog(tmp_path / "catalog.sqlite")
    try:
        published = catalog.create_job("acme", "ingest")
        catalog.finish_job(published, "succeeded", {"files": [
            {"document_id": "a/b", "status": "published", "version": 2, "source": "a_b.md"}]})
        failed = catalog.create_job("acme", "ingest")
        catalog.finish_job(failed, "failed", {"error": "boom"})
        old = tmp_path / "uploads" / "acme"
        (old / published).mkdir(parents=True)
        (old / published / "a_b.md").write_bytes(b"# A over B")
        (old / failed).mkdir(parents=True)
        (old / failed / "c.md").write_bytes(b"# never published")
        assert migrate_legacy_uploads(tmp_path, catalog, store) == 1
        assert read_raw(store, "acme", "a/b", 2).content == b"# A over B"
        assert not (old / published).exists()
        assert (old / failed / "c.md").exists()  # stays until its document is withdrawn
        assert migrate_legacy_uploads(tmp_path, catalog, store) == 0  # idempotent
    finally:
        catalog.close()
