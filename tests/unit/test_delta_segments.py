"""Incremental publishes go to a delta segment over the published base; compaction rebuilds the base.

The hash embedder and small thresholds make every decision visible on a handful of documents.
"""

from __future__ import annotations

import os

import pytest

from citadel.ingest.sources import AclSpec, discover
from citadel.segments.compaction import RebuildReason
from citadel.segments.manifest import Manifest, SegmentKind, read_manifest
from citadel.types import Principal

STAFF = Principal("t", "s", frozenset({"staff"}))
ACL = AclSpec.from_groups(["staff"])
TOPICS = ["annual leave", "expense claims", "travel booking", "laptop security", "parking permits",
          "training budget", "remote work", "office hours", "sick leave", "pension scheme"]
DELTA_ON_EVERY_BASE = {"delta_min_base_rows": 0, "delta_max_fraction": 1.0, "delta_max_rows": 1000,
                       "tombstone_max_fraction": 0.5}


def _policy(topic: str, detail: str = "") -> str:
    sections = "\n\n".join(f"## {topic.title()} rule {n}\n\nThe {topic} rule {n} says staff follow step {n} "
                           f"of the {topic} process.{detail}" for n in range(1, 4))
    return f"# {topic.title()} policy\n\n{sections}\n"


def _write(docs, topic: str, detail: str = ""):
    path = docs / f"{topic.replace(' ', '-')}.md"
    path.write_text(_policy(topic, detail))
    return path


@pytest.fixture
def setup(make_runtime, tmp_path):
    def build(**index):
        runtime = make_runtime(index={**DELTA_ON_EVERY_BASE, **index})
        docs = tmp_path / "docs"
        docs.mkdir(exist_ok=True)
        return runtime, docs

    return build


def _ingest(runtime, *paths):
    return runtime.ingestor().ingest("t", discover(list(paths)), ACL)


def _manifest(runtime) -> Manifest:
    segment = runtime.catalog.published_segment("t")
    return read_manifest(runtime.config.partitions_dir / "t" / segment)


def _documents_found(runtime, query: str) -> list[str]:
    return [p.document_id for p in runtime.retriever.retrieve(STAFF, query).passages]


def test_a_new_document_lands_in_a_delta_and_the_base_is_not_rewritten(setup, tmp_path):
    runtime, docs = setup()
    first = _ingest(runtime, *[_write(docs, t) for t in TOPICS[:6]])
    assert first.segment_kind is SegmentKind.BASE
    base = runtime.catalog.published_segment("t")
    base_dir = runtime.config.partitions_dir / "t" / base
    base_files = {p: os.stat(p).st_mtime_ns for p in base_dir.rglob("*") if p.is_file()}

    second = _ingest(runtime, _write(docs, "pension scheme"))
    assert second.segment_kind is SegmentKind.DELTA and second.rebuild_reason is None
    manifest = _manifest(runtime)
    assert manifest.kind is SegmentKind.DELTA and manifest.base == base
    assert manifest.chunks == second.to_dict()["chunks"] and manifest.tombstones == 0
    assert second.to_dict()["segment_kind"] == "delta"
    assert {p: os.stat(p).st_mtime_ns for p in base_dir.rglob("*") if p.is_file()} == base_files
    # both legs see the new rows and the old ones
    assert _documents_found(runtime, "pension scheme process")[0] == "pension-scheme"
    assert _documents_found(runtime, "annual leave process")[0] == "annual-leave"
    partition = runtime.partitions.get("t")
    assert len(partition) == first.total_chunks + manifest.chunks
    ids = partition.table.column("chunk_id").to_pylist()
    assert len(ids) == len(set(ids))


def test_a_new_version_tombstones_the_old_rows_and_only_the_new_text_is_served(setup):
    runtime, docs = setup()
    _ingest(runtime, *[_write(docs, t) for t in TOPICS[:6]])
    base_rows = len(runtime.partitions.get("t"))
    report = _ingest(runtime, _write(docs, "annual leave", " Leave now accrues monthly."))
    assert report.segment_kind is SegmentKind.DELTA
    manifest = _manifest(runtime)
    assert manifest.tombstones == 3 and manifest.base_rows == base_rows
    passages = runtime.retriever.retrieve(STAFF, "annual leave accrues monthly").passages
    leave = [p for p in passages if p.document_id == "annual-leave"]
    assert leave and all(p.version == 2 and "accrues monthly" in p.text for p in leave)


def test_the_loaded_base_is_reused_when_a_delta_is_published(setup):
    runtime, docs = setup()
    _ingest(runtime, *[_write(docs, t) for t in TOPICS[:6]])
    before = runtime.partitions.get("t")
    _ingest(runtime, _write(docs, "pension scheme"))
    after = runtime.partitions.get("t")
    assert after is not before and after.segments[0] is before.segments[0]


def test_a_growing_delta_is_compacted_into_a_new_base(setup):
    runtime, docs = setup(delta_max_fraction=0.4)
    _ingest(runtime, *[_write(docs, t) for t in TOPICS[:5]])
    first_base = runtime.catalog.published_segment("t")
    assert _ingest(runtime, _write(docs, TOPICS[5])).segment_kind is SegmentKind.DELTA
    report = _ingest(runtime, _write(docs, TOPICS[6]), _write(docs, TOPICS[7]))
    assert report.segment_kind is SegmentKind.BASE and report.rebuild_reason is RebuildReason.DELTA_FULL
    assert _manifest(runtime).kind is SegmentKind.BASE
    assert len(runtime.partitions.get("t")) == 8 * 3
    for topic in TOPICS[:8]:
        assert _documents_found(runtime, f"{topic} process")[0] == topic.replace(" ", "-")
    # the first base stays only while a reader may hold it: the next publish prunes it
    _ingest(runtime, _write(docs, TOPICS[8]))
    assert not (runtime.config.partitions_dir / "t" / first_base).exists()


def test_tombstones_past_the_threshold_rebuild_the_base(setup):
    runtime, docs = setup(tombstone_max_fraction=0.3)
    _ingest(runtime, *[_write(docs, t) for t in TOPICS[:6]])
    assert _ingest(runtime, _write(docs, TOPICS[0], " Revised.")).segment_kind is SegmentKind.DELTA
    report = _ingest(runtime, _write(docs, TOPICS[1], " Revised."), _write(docs, TOPICS[2], " Revised."))
    assert report.segment_kind is SegmentKind.BASE and report.rebuild_reason is RebuildReason.TOMBSTONES
    partition = runtime.partitions.get("t")
    assert len(partition) == 6 * 3 and partition.tombstones == 0  # the superseded rows are gone


def test_compact_folds_the_delta_and_drops_withdrawn_rows(setup):
    runtime, docs = setup()
    _ingest(runtime, *[_write(docs, t) for t in TOPICS[:6]])
    _ingest(runtime, _write(docs, "pension scheme"))
    runtime.catalog.withdraw("t", "laptop-security", actor="test")
    report = runtime.ingestor().compact("t")
    assert report.segment_kind is SegmentKind.BASE and report.rebuild_reason is RebuildReason.FORCED
    partition = runtime.partitions.get("t")
    documents = set(partition.table.column("document_id").to_pylist())
    assert "laptop-security" not in documents and "pension-scheme" in documents
    assert len(partition) == 6 * 3
    assert _documents_found(runtime, "pension scheme process")[0] == "pension-scheme"


def test_small_tenants_are_rebuilt_whole_by_default(make_runtime, tmp_path):
    runtime = make_runtime()
    docs = tmp_path / "docs"
    docs.mkdir()
    _ingest(runtime, *[_write(docs, t) for t in TOPICS[:3]])
    report = _ingest(runtime, _write(docs, TOPICS[3]))
    assert report.segment_kind is SegmentKind.BASE and report.rebuild_reason is RebuildReason.SMALL_BASE


def test_a_crash_before_a_delta_publish_leaves_the_previous_segment_served(setup):
    runtime, docs = setup()
    _ingest(runtime, *[_write(docs, t) for t in TOPICS[:6]])
    published = runtime.catalog.published_segment("t")

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed mid-publish")

    real_publish, runtime.catalog.publish = runtime.catalog.publish, crash
    with pytest.raises(KeyboardInterrupt):
        _ingest(runtime, _write(docs, "pension scheme"))
    runtime.catalog.publish = real_publish
    assert runtime.catalog.published_segment("t") == published
    assert "pension-scheme" not in _documents_found(runtime, "pension scheme process")
    assert _ingest(runtime, _write(docs, "pension scheme")).segment_kind is SegmentKind.DELTA
    assert _documents_found(runtime, "pension scheme process")[0] == "pension-scheme"
