"""A model change re-embeds every live row, resumably, and the retriever refuses to
search a segment embedded with another model than the query's.

Two deterministic fakes stand for two models: the hash embedder, and the same hash rotated by one
coordinate under another model id, so a vector that was re-embedded is told apart from a stored one.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from citadel.embedding.fake import HashEmbedder
from citadel.errors import CitadelError
from citadel.ingest.local import Ingestor
from citadel.ingest.sources import AclSpec, discover
from citadel.segments.build import chunks_to_table
from citadel.segments.layout import VECTORS, stack_of
from citadel.segments.manifest import read_manifest
from citadel.segments.partition import Partition
from citadel.ingest.reembed import PROGRESS, WORK_DIR
from citadel.retrieval.retriever import Retriever
from citadel.ingest.steps import build_tenant_segment, live_versions
from citadel.types import Principal, embed_text_for

TENANT = "t"
STAFF = Principal(TENANT, "s", frozenset({"staff"}))
ACL = AclSpec.from_groups(["staff"])
TOPICS = ["annual leave", "expense claims", "travel booking", "laptop security", "parking permits"]


class OtherModel(HashEmbedder):
    """A second 'model': different vectors, another id."""

    model_id = "test/other-model-v2"

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return np.roll(super().embed_passages(texts), 1, axis=1)


class CountingModel(OtherModel):
    def __init__(self, fail_after_calls: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.texts = 0
        self.calls = 0
        self._fail_after = fail_after_calls

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        if self._fail_after is not None and self.calls >= self._fail_after:
            raise RuntimeError("the embedder crashed")
        self.calls += 1
        self.texts += len(texts)
        return super().embed_passages(texts)


def _policy(topic: str) -> str:
    sections = "\n\n".join(f"## {topic.title()} rule {n}\n\nThe {topic} rule {n} says staff follow step {n} "
                           f"of the {topic} process." for n in range(1, 4))
    return f"# {topic.title()} policy\n\n{sections}\n"


@pytest.fixture
def tenant(make_runtime, tmp_path):
    """A tenant published with the hash embedder (model A)."""
    runtime = make_runtime(ingest_pipeline={"embed_batch_size": 2})
    docs = tmp_path / "docs"
    docs.mkdir()
    for topic in TOPICS:
        (docs / f"{topic.replace(' ', '-')}.md").write_text(_policy(topic))
    runtime.ingestor().ingest(TENANT, discover([docs]), ACL)
    return runtime, docs


def _ingestor(runtime, embedder) -> Ingestor:
    return Ingestor(runtime.catalog, embedder, runtime.config)


def _retriever(runtime, embedder) -> Retriever:
    return Retriever(runtime.catalog, runtime.partitions, embedder, runtime.config.retrieval, runtime.config.index)


def _published(runtime) -> Partition:
    segment = runtime.catalog.published_segment(TENANT)
    return Partition(runtime.config.partitions_dir / TENANT / segment)


def _assert_all_vectors_from(partition: Partition, embedder) -> None:
    """Every row's stored vector is `embedder`'s vector of the row's embedded text."""
    texts = [embed_text_for(partition.row(r)["context_header"], partition.row(r)["text"]) for r in range(len(partition))]
    stored = partition.vectors_at(np.arange(len(partition)))
    np.testing.assert_allclose(stored, embedder.embed_passages(texts), atol=1e-6)
    for segment in partition.segments:
        assert (segment.manifest.model_id, segment.manifest.dim) == (embedder.model_id, embedder.dim)


def test_the_retriever_refuses_a_segment_of_another_model(tenant):
    runtime, _ = tenant
    with pytest.raises(CitadelError) as raised:
        _retriever(runtime, OtherModel()).retrieve(STAFF, "annual leave rule")
    assert raised.value.code == "embedding_model_mismatch"
    assert "test/other-model-v2" in str(raised.value) and "reembed" in str(raised.value)
    with pytest.raises(CitadelError) as raised:  # same model id, another dimension
        _retriever(runtime, HashEmbedder(dim=64)).retrieve(STAFF, "annual leave rule")
    assert raised.value.code == "embedding_model_mismatch"
    assert _retriever(runtime, HashEmbedder()).retrieve(STAFF, "annual leave rule").passages  # the right model


def test_reembed_embeds_every_live_row_with_the_new_model(tenant):
    runtime, docs = tenant
    runtime.catalog.withdraw(TENANT, "parking-permits", actor="test")
    before = _published(runtime)
    old_rows = len(before)

    report = _ingestor(runtime, OtherModel()).reembed(TENANT)

    after = _published(runtime)
    assert report.status == "succeeded" and report.rebuild_reason == "model_change"
    assert report.reembed["rows"] == len(after) == old_rows - 3  # the withdrawn document's rows are gone
    assert report.reembed["previous_model"] == HashEmbedder.model_id
    _assert_all_vectors_from(after, OtherModel())
    assert not (runtime.config.partitions_dir / TENANT / WORK_DIR).exists()
    found = _retriever(runtime, OtherModel()).retrieve(STAFF, "annual leave rule").passages
    assert found and found[0].document_id == "annual-leave"
    with pytest.raises(CitadelError):
        _retriever(runtime, HashEmbedder()).retrieve(STAFF, "annual leave rule")


def test_the_next_publish_re_embeds_first_and_never_reuses_the_old_vectors(tenant):
    runtime, docs = tenant
    (docs / "pension-scheme.md").write_text(_policy("pension scheme"))

    report = _ingestor(runtime, OtherModel()).ingest(TENANT, discover([docs / "pension-scheme.md"]), ACL)

    assert report.status == "succeeded"
    partition = _published(runtime)
    assert len(partition) == 3 * (len(TOPICS) + 1)
    _assert_all_vectors_from(partition, OtherModel())  # the old documents' rows too: they were re-embedded


def test_compact_after_a_model_change_re_embeds(tenant):
    runtime, _ = tenant
    report = _ingestor(runtime, OtherModel()).compact(TENANT)
    assert report.rebuild_reason == "model_change"
    _assert_all_vectors_from(_published(runtime), OtherModel())


def test_a_build_never_mixes_stored_vectors_of_another_model(tenant):
    runtime, _ = tenant
    other = OtherModel()
    with pytest.raises(CitadelError) as raised:
        build_tenant_segment(runtime.config.partitions_dir, TENANT, chunks_to_table([]),
                             np.zeros((0, other.dim), np.float32), runtime.catalog.published_segment(TENANT),
                             live_versions(runtime.catalog, TENANT, set()), runtime.config.index, other.model_id,
                             other.dim, force_rebuild=True)
    assert raised.value.code == "reembed_required"


def test_a_crashed_reembed_resumes_from_its_last_batch(tenant):
    runtime, _ = tenant
    published = runtime.catalog.published_segment(TENANT)
    total = len(_published(runtime))
    crashing = CountingModel(fail_after_calls=3)  # batches of 2 rows: 6 rows done, then a crash

    with pytest.raises(RuntimeError):
        _ingestor(runtime, crashing).reembed(TENANT)

    assert runtime.catalog.published_segment(TENANT) == published  # nothing was published
    assert _retriever(runtime, HashEmbedder()).retrieve(STAFF, "annual leave rule").passages  # still served
    progress = json.loads((runtime.config.partitions_dir / TENANT / WORK_DIR / PROGRESS).read_text())
    assert progress["done"] == 6 and progress["identity"]["rows"] == total

    resumed = CountingModel()
    report = _ingestor(runtime, resumed).reembed(TENANT)

    assert report.reembed["resumed_from"] == 6
    assert resumed.texts == total - 6  # only the rows the crashed run had not finished
    _assert_all_vectors_from(_published(runtime), OtherModel())


def test_a_resume_starts_over_when_the_live_rows_changed(tenant):
    runtime, _ = tenant
    with pytest.raises(RuntimeError):
        _ingestor(runtime, CountingModel(fail_after_calls=2)).reembed(TENANT)
    runtime.catalog.withdraw(TENANT, "annual-leave", actor="test")

    fresh = CountingModel()
    report = _ingestor(runtime, fresh).reembed(TENANT)

    assert report.reembed["resumed_from"] == 0
    assert fresh.texts == len(_published(runtime)) == 3 * (len(TOPICS) - 1)
    _assert_all_vectors_from(_published(runtime), OtherModel())


def test_a_tenant_with_nothing_live_re_embeds_to_an_empty_segment(tenant):
    runtime, _ = tenant
    for topic in TOPICS:
        runtime.catalog.withdraw(TENANT, topic.replace(" ", "-"), actor="test")
    report = _ingestor(runtime, OtherModel()).reembed(TENANT)
    assert report.reembed["rows"] == 0 and len(_published(runtime)) == 0
    assert _retriever(runtime, OtherModel()).retrieve(STAFF, "annual leave").passages == []


def test_the_same_model_needs_no_reembed_and_publishes_a_delta(make_runtime, tmp_path):
    runtime = make_runtime(index={"delta_min_base_rows": 0, "delta_max_fraction": 1.0, "delta_max_rows": 1000})
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text(_policy("annual leave"))
    runtime.ingestor().ingest(TENANT, discover([docs]), ACL)
    (docs / "b.md").write_text(_policy("expense claims"))
    class SameModel(HashEmbedder):
        def __init__(self):
            super().__init__()
            self.texts = 0

        def embed_passages(self, texts):
            self.texts += len(texts)
            return super().embed_passages(texts)

    same = SameModel()
    report = _ingestor(runtime, same).ingest(TENANT, discover([docs / "b.md"]), ACL)
    assert report.segment_kind == "delta" and report.reembed is None
    assert same.texts == 3  # only the new document's rows


def test_the_cli_reembeds_a_tenant_after_a_dimension_change(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from citadel.cli.main import app

    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CITADEL_EMBEDDING__BACKEND", "hash")
    monkeypatch.setenv("CITADEL_INGEST_PIPELINE__ENGINE", "local")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "leave.md").write_text(_policy("annual leave"))
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", "--tenant", TENANT, "--groups", "staff", str(docs)]).exit_code == 0

    monkeypatch.setenv("CITADEL_EMBEDDING__DIM", "128")
    refused = runner.invoke(app, ["retrieve", "--tenant", TENANT, "--user", "u", "--groups", "staff", "leave"])
    assert refused.exit_code == 2 and "reembed" in refused.output
    result = runner.invoke(app, ["reembed", "--tenant", TENANT], catch_exceptions=False)

    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["status"] == "succeeded" and summary["reembed"]["rows"] == 3
    root = tmp_path / "home" / "partitions" / TENANT
    manifest = read_manifest(root / summary["segment_id"])
    assert manifest.dim == 128 and np.load(root / summary["segment_id"] / VECTORS).shape == (3, 128)
    assert stack_of(root, summary["segment_id"]) == [summary["segment_id"]]
    retrieved = runner.invoke(app, ["retrieve", "--tenant", TENANT, "--user", "u", "--groups", "staff", "--json",
                                    "annual leave"], catch_exceptions=False)
    assert json.loads(retrieved.stdout)["passages"]
