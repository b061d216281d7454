"""The typed segment manifest: what the writers put on disk reads back as the same Manifest, and the JSON
keeps the keys (and their order) segments have always had, so existing segments still load."""

from __future__ import annotations

import json

import numpy as np
import pytest

from citadel.config import IndexConfig
from citadel.errors import VerificationFailed
from citadel.segments.build import SegmentSpec, build_delta_segment, build_segment, chunks_to_table
from citadel.segments.layout import CHUNKS, TOMBSTONES, VECTORS, stack_of
from citadel.segments.manifest import MANIFEST, DocumentVersion, Manifest, SegmentKind, read_manifest, write_manifest
from citadel.types import Chunk

DIM = 8
BASE_KEYS = ["tenant_id", "tier", "model_id", "dim", "chunks", "documents", "checksums", "created_at", "kind",
             "backend"]
# A manifest as the writer before the typed Manifest produced it (a delta: the base keys, then these).
LEGACY_DELTA = {
    "tenant_id": "acme", "tier": "tiny", "model_id": "citadel/hash-embedder-v1", "dim": 384, "chunks": 2,
    "documents": [{"document_id": "leave", "version": 2}], "checksums": {"chunks.parquet": "ab", "vectors.npy": "cd",
                                                                         "tombstones.npy": "ef"},
    "created_at": 1764547200.123456, "kind": "delta", "backend": "exact", "base": "20261201T000000-aaaaaaaa",
    "base_rows": 12, "tombstones": 3,
}


def _chunks(document_id: str, version: int, count: int) -> list[Chunk]:
    return [Chunk(chunk_id=f"t:{document_id}:v{version}:{n:04d}", tenant_id="t", document_id=document_id,
                  version=version, ordinal=n, title=document_id, heading_path=("H",), page=None, text=f"{document_id} text {n}",
                  context_header=document_id, content_hash=f"h{n}", source=f"{document_id}.md", section_index=0)
            for n in range(count)]


def _vectors(rows: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(rows, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture
def base(tmp_path):
    table = chunks_to_table(_chunks("leave", 1, 3) + _chunks("travel", 2, 2))
    return build_segment(tmp_path, SegmentSpec("t", "tiny", "fake-model", DIM), table, _vectors(5), IndexConfig())


def test_a_base_segments_manifest_reads_back_typed_with_the_legacy_keys(base):
    raw = json.loads((base / MANIFEST).read_text())
    assert list(raw) == BASE_KEYS  # no delta keys on a base
    manifest = read_manifest(base)
    assert (manifest.tenant_id, manifest.tier, manifest.model_id, manifest.dim, manifest.chunks) == (
        "t", "tiny", "fake-model", DIM, 5)
    assert manifest.kind is SegmentKind.BASE and manifest.backend == "exact" and manifest.base is None
    assert manifest.documents == (DocumentVersion("leave", 1), DocumentVersion("travel", 2))
    assert set(manifest.checksums) == {CHUNKS, VECTORS} and manifest.total_rows == 5
    assert manifest.to_dict() == raw and Manifest.from_dict(raw) == manifest
    assert (base / MANIFEST).read_text() == json.dumps(raw, indent=1)  # rewriting it changes no byte
    write_manifest(base, manifest)
    assert json.loads((base / MANIFEST).read_text()) == raw and read_manifest(base) == manifest


def test_a_delta_manifest_names_its_base_and_stacks_on_it(base):
    table = chunks_to_table(_chunks("leave", 2, 2))
    delta = build_delta_segment(base.parent, SegmentSpec("t", "tiny", "fake-model", DIM), base.name, 5,
                                np.array([0, 1, 2]), table, _vectors(2, seed=1))
    raw = json.loads((delta / MANIFEST).read_text())
    assert list(raw) == BASE_KEYS + ["base", "base_rows", "tombstones"]
    manifest = read_manifest(delta)
    assert manifest.is_delta and manifest.kind == "delta" and manifest.base == base.name
    assert (manifest.base_rows, manifest.tombstones, manifest.total_rows) == (5, 3, 7)
    assert set(manifest.checksums) == {CHUNKS, VECTORS, TOMBSTONES} and manifest.to_dict() == raw
    assert stack_of(base.parent, delta.name) == [base.name, delta.name] == manifest.stack(delta.name)


def test_a_legacy_manifest_round_trips_byte_for_byte():
    manifest = Manifest.from_dict(LEGACY_DELTA)
    assert manifest.kind is SegmentKind.DELTA and manifest.checksums["tombstones.npy"] == "ef"
    assert json.dumps(manifest.to_dict(), indent=1) == json.dumps(LEGACY_DELTA, indent=1)


def test_a_manifest_from_before_deltas_is_a_base_with_its_tiers_backend():
    old = {k: v for k, v in LEGACY_DELTA.items() if k not in ("kind", "backend", "base", "base_rows", "tombstones")}
    manifest = Manifest.from_dict({**old, "tier": "hot"})
    assert (manifest.kind, manifest.backend, manifest.base_rows, manifest.tombstones) == (
        SegmentKind.BASE, "hnsw", 0, 0)


@pytest.mark.parametrize("broken", [
    {k: v for k, v in LEGACY_DELTA.items() if k != "dim"},
    {**LEGACY_DELTA, "kind": "sideways"},
    {**LEGACY_DELTA, "base": None},  # a delta must name its base
    {**LEGACY_DELTA, "kind": "base"},  # a base names none
])
def test_a_malformed_manifest_fails_verification(tmp_path, broken):
    (tmp_path / MANIFEST).write_text(json.dumps(broken))
    with pytest.raises(VerificationFailed):
        read_manifest(tmp_path)
