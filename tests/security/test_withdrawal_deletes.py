"""Withdrawing a document deletes it.

Before: `withdraw` only marked the catalog. The chunk text, vectors and BM25 postings stayed in the
published partition files until a later compaction (and in the previous segment kept beside it), the
raw upload stayed forever, and the answer log kept answers quoting it. Now, once withdraw returns,
nothing under the home holds the document's text.

The check is meant to be meaningful, not a grep that compressed files would pass anyway:
- every file's raw bytes (SQLite pages, WAL, uploads, JSON, tantivy files …) are searched;
- Parquet column chunks are compressed (snappy), so every Parquet file is also decoded and its
  string cells searched; gzip/zstd/bz2/xz-framed files are searched decompressed too;
- tantivy does not store the text (citadel/index/bm25.py) but its postings are the text's terms, so
  every BM25 index under the home is searched for the planted word;
- vectors cannot be grepped: every segment's vectors.npy must have exactly as many rows as its chunk
  table, none of which belongs to the document (checked against the catalog's per-version manifest).

Run twice: with whole rebuilds (small tenants, the default) and with delta publishes, where an older
version sits tombstoned in the base and the current one in the delta.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import make_home
from tests.security.identity_helpers import client_for

DOCUMENT = "vault-memo"
# Unique words: nothing else in the example corpus or the code uses them.
PLANTED_V1 = "The Zorvexquill vault opens with the keycode amber-otter-5521 every Thursday."
PLANTED_V2 = "The Zorvexquill vault now opens with the keycode cobalt-heron-7730 on Fridays."
PLANTED_WORD = "zorvexquill"
NEEDLES = (PLANTED_V1, PLANTED_V2, "amber-otter-5521", "cobalt-heron-7730", PLANTED_WORD)
QUESTION = "What keycode opens the vault?"


def _memo(sentence: str) -> dict:
    return {"document_id": DOCUMENT, "filename": "vault-memo.md", "groups": ["staff"],
            "text": f"# Vault memo\n\n## Access\n\n{sentence}\n"}


def _upload(client, home, sentence: str) -> None:
    response = client.post("/v1/admin/tenants/acme/documents", json=_memo(sentence), headers=home.admin_headers())
    assert response.status_code == 202, response.text
    client.app.state.services.admin.wait_for_jobs(60)
    job = client.get(f"/v1/admin/jobs/{response.json()['job_id']}", headers=home.admin_headers()).json()
    assert job["status"] == "succeeded", job


@pytest.fixture(params=["rebuild", "delta"])
def withdrawn(request, tmp_path):
    """Two versions of the memo uploaded and asked about (cache and answer log hold it), then withdrawn."""
    environ = {"CITADEL_INDEX__DELTA_MIN_BASE_ROWS": "1"} if request.param == "delta" else {}
    home = make_home(tmp_path / "home", **environ)
    with client_for(home) as client:
        _upload(client, home, PLANTED_V1)
        if request.param == "delta":  # v1 into the base, v2 into a delta over it
            client.app.state.services.wiring.ingestor().compact("acme")
        _upload(client, home, PLANTED_V2)
        catalog = client.app.state.services.wiring.catalog
        chunk_ids = {cid for version in (1, 2) for cid in catalog.manifest("acme", DOCUMENT, version)}
        assert chunk_ids
        answered = client.post("/v1/answer", json={"question": QUESTION}, headers=home.headers()).json()
        assert DOCUMENT in {c["document_id"] for c in answered["citations"]}, answered  # cached and logged
        vault = client.app.state.services.wiring.prompt_vault
        assert vault.get(answered["request_id"]) is not None  # its prompt is kept, encrypted
        response = client.post(f"/v1/admin/tenants/acme/documents/{DOCUMENT}/withdraw", headers=home.admin_headers())
        assert response.status_code == 200, response.text
        assert vault.get(answered["request_id"]) is None  # and goes with the document
        yield home, client, chunk_ids
        client.app.state.services.admin.wait_for_jobs(60)


def _found_in(data: bytes) -> list[str]:
    lowered = data.lower()
    return [needle for needle in NEEDLES if needle.lower().encode() in lowered]


def _decompressed(data: bytes) -> bytes | None:
    """The content of a gzip/bz2/xz/zstd-framed file, None for anything else."""
    openers = {b"\x1f\x8b": gzip.decompress, b"BZh": bz2.decompress, b"\xfd7zXZ": lzma.decompress}
    for magic, open_ in openers.items():
        if data.startswith(magic):
            return open_(data)
    if data.startswith(b"\x28\xb5\x2f\xfd"):
        zstandard = pytest.importorskip("zstandard")
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return None


def _parquet_text(path: Path) -> bytes:
    table = pq.read_table(path)
    cells = [str(value) for column in table.columns for value in column.to_pylist()]
    return "\n".join(cells).encode()


def test_no_file_under_the_home_holds_the_withdrawn_text(withdrawn):
    home, _, _ = withdrawn
    files = [path for path in Path(home.config.home).rglob("*") if path.is_file()]
    assert any(path.suffix == ".parquet" for path in files)  # the walk does see the partition files
    leaks = {}
    for path in files:
        data = path.read_bytes()
        found = _found_in(data)
        inner = _decompressed(data)
        if inner is not None:
            found += _found_in(inner)
        if path.suffix == ".parquet":
            found += _found_in(_parquet_text(path))
        if found:
            leaks[str(path.relative_to(home.config.home))] = sorted(set(found))
    assert not leaks, leaks


def test_no_bm25_index_under_the_home_holds_its_postings(withdrawn):
    from citadel.index.bm25 import BM25Index

    home, _, _ = withdrawn
    indexes = [meta.parent for meta in Path(home.config.home).rglob("bm25.json")]
    assert indexes
    for directory in indexes:
        _, rows = BM25Index.load(directory).search(PLANTED_WORD, 10)
        assert (rows < 0).all(), directory


def test_no_segment_holds_its_chunks_or_vectors(withdrawn):
    from citadel.segments.layout import CHUNKS, VECTORS

    home, _, chunk_ids = withdrawn
    segments = [chunks.parent for chunks in Path(home.config.partitions_dir).rglob(CHUNKS)]
    assert segments
    for segment in segments:
        table = pq.read_table(segment / CHUNKS, columns=["chunk_id", "document_id"])
        assert DOCUMENT not in set(table.column("document_id").to_pylist()), segment
        assert not chunk_ids & set(table.column("chunk_id").to_pylist()), segment
        assert len(np.load(segment / VECTORS, mmap_mode="r")) == table.num_rows, segment


def test_its_raw_uploads_are_gone(withdrawn):
    home, client, _ = withdrawn
    objects = client.app.state.services.admin.objects
    assert objects.list_prefix(f"raw/acme/{DOCUMENT}/") == []  # both versions' raw files
    uploads = Path(home.config.home) / "uploads" / "acme"  # and nothing of the older layout
    assert not [path for path in uploads.rglob("*") if path.is_file() and path.stem == DOCUMENT]


def test_queries_never_return_it(withdrawn):
    home, client, _ = withdrawn
    for query in (QUESTION, PLANTED_V1, PLANTED_V2, PLANTED_WORD):
        passages = client.post("/v1/retrieve", json={"query": query, "top_k": 20}, headers=home.headers()).json()
        assert DOCUMENT not in {p["document_id"] for p in passages["passages"]}, query
        answer = client.post("/v1/answer", json={"question": query}, headers=home.headers()).json()
        assert DOCUMENT not in {c["document_id"] for c in answer["citations"]}, query
        assert not _found_in(answer["answer"].encode()), answer


def test_the_catalog_says_withdrawn_and_audits_it(withdrawn):
    home, client, _ = withdrawn
    catalog = client.app.state.services.wiring.catalog
    assert catalog.get_document("acme", DOCUMENT).status == "withdrawn"
    assert any(row["action"] == "withdraw" and row["target"] == DOCUMENT for row in catalog.audit_log("acme"))
