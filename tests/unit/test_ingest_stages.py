"""The shared ingestion stages (citadel/ingest/steps.py) and the Ray Data stage classes run without Ray."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow.parquet as pq
import pytest

from citadel.catalog.base import LatestVersion, decide_next_version
from citadel.config import IndexConfig, IngestPipelineConfig, load_config
from citadel.embedding.fake import HashEmbedder
from citadel.errors import CitadelError
from citadel.ingest.engine import DuplicateDocuments, TenantSources
from citadel.ingest.jobs import BadManifest, jobs_from_manifest
from citadel.ingest.sources import AclSpec, InlineDocument, TrustedFields, discover
from citadel.ingest.steps import VersionSnapshot, embed_rows, plan_build_groups
from citadel.types import Governance, ParsedDocument
from indexing.plan import plan_stages
from indexing.records import records_from_jobs, records_from_manifest, records_from_paths
from indexing.stages import (
    AssignPartitionStage,
    EmbedStage,
    ParseChunkStage,
    TenantBuild,
    build_staged_tenant,
)

GOOD = "# Leave policy\n\n## Annual leave\n\nStaff receive 25 days of annual leave each year.\n"


# ------------------------------------------------------------------------------------ versions
@pytest.mark.parametrize(
    ("latest", "requested", "expected"),
    [
        (None, None, (1, False)),
        (None, 4, (4, False)),
        (LatestVersion(2, "h", "published"), None, (2, True)),  # same content: a no-op
        (LatestVersion(2, "h", "superseded"), None, (3, False)),
        (LatestVersion(2, "other", "published"), None, (3, False)),
        (LatestVersion(2, "other", "published"), 5, (5, False)),
    ],
)
def test_decide_next_version(latest, requested, expected):
    assert decide_next_version("doc", latest, "h", requested) == expected


def test_stale_requested_version_is_refused():
    with pytest.raises(CitadelError) as error:
        decide_next_version("doc", LatestVersion(3, "other", "published"), "h", 2)
    assert error.value.code == "stale_version"


def test_snapshot_decides_like_the_catalog(make_runtime, tmp_path):
    runtime = make_runtime()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "leave.md").write_text(GOOD)
    runtime.ingestor().ingest("t", discover([docs]), AclSpec.from_groups(["staff"]))
    latest = runtime.catalog.latest_versions(["t", "other"])
    assert list(latest) == [("t", "leave")]
    snapshot = VersionSnapshot(latest)
    for content in (latest[("t", "leave")].content_hash, "changed"):
        assert snapshot.next_version("t", "leave", content) == runtime.catalog.next_version("t", "leave", content)
    assert snapshot.next_version("other", "leave", "x") == (1, False)


# --------------------------------------------------------------------------------------- embed
class _PoisonEmbedder(HashEmbedder):
    def embed_passages(self, texts):
        if any("POISON" in t for t in texts):
            raise RuntimeError("model crashed")
        return super().embed_passages(texts)


def test_embed_rows_isolates_the_failing_document():
    embedder = _PoisonEmbedder()
    texts = ["annual leave", "POISON", "hotel limit", "more leave"]
    result = embed_rows(embedder, texts, ["a", "b", "c", "a"])
    assert result.failures == {"b": "model crashed"}
    np.testing.assert_allclose(result.vectors[[0, 2, 3]], HashEmbedder().embed_passages([texts[0], texts[2], texts[3]]))
    assert not result.vectors[1].any()


def test_embed_rows_rejects_a_wrong_shape():
    class Short(HashEmbedder):
        def embed_passages(self, texts):
            return super().embed_passages(texts)[:, :10]

    result = embed_rows(Short(), ["a", "b"], ["x", "x"])
    assert set(result.failures) == {"x"} and "shape" in result.failures["x"]


# ------------------------------------------------------------------------------------ planning
def test_tenants_with_an_ann_index_build_alone_and_tiny_ones_share():
    config = IndexConfig(tiny_max_chunks=100, tier_overrides={"small-but-cold": "cold"})
    counts = {"big": 5000, "small-but-cold": 10, "a": 60, "b": 50, "c": 30, "d": 20}
    groups = plan_build_groups(counts, config, pack_chunks=100)
    assert ["big"] in groups and ["small-but-cold"] in groups
    tiny_groups = [g for g in groups if g not in (["big"], ["small-but-cold"])]
    assert sorted(t for g in tiny_groups for t in g) == ["a", "b", "c", "d"]
    assert all(sum(counts[t] for t in g) <= 100 for g in tiny_groups)


def test_stage_plan_fits_the_instance():
    plan = plan_stages(IngestPipelineConfig(embed_actors=1), ray_cpus=2, machine_cpus=2, documents=1000)
    assert plan.embed_cpus == 1.5 and plan.torch_threads == 2 and plan.device == "cpu"
    assert plan.input_blocks >= 4
    two = plan_stages(IngestPipelineConfig(embed_actors=2), ray_cpus=2, machine_cpus=2, documents=3)
    assert (two.embed_cpus, two.torch_threads, two.input_blocks) == (0.75, 1, 3)
    gpu = plan_stages(IngestPipelineConfig(embed_num_gpus=0.5), ray_cpus=4, machine_cpus=4, documents=10)
    assert (gpu.device, gpu.embed_gpus, gpu.embed_cpus) == ("cuda", 0.5, 1.0)
    with pytest.raises(ValueError, match="embed_actors"):
        plan_stages(IngestPipelineConfig(embed_actors=4), ray_cpus=2, machine_cpus=2, documents=10)


# ------------------------------------------------------------------------------------- records
def test_manifest_records_resolve_relative_sources(tmp_path):
    (tmp_path / "docs").mkdir()
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text('{"tenant_id": "t", "document_id": "a", "source": "docs/a.md", "groups": ["x"]}\n'
                        '{"tenant_id": "u", "document_id": "b", "source": "/abs/b.md", "version": 3}\n')
    rows = records_from_manifest(manifest).to_pylist()
    assert rows[0]["source"] == str(tmp_path.resolve() / "docs" / "a.md") and rows[0]["groups"] == ["x"]
    assert (rows[1]["source"], rows[1]["groups"], rows[1]["version"], rows[1]["doc_order"]) == ("/abs/b.md", None, 3, 1)
    twice = tmp_path / "twice.jsonl"
    twice.write_text('{"tenant_id": "t", "document_id": "a", "source": "a.md"}\n' * 2)
    with pytest.raises(DuplicateDocuments, match="t:a"):
        records_from_manifest(twice)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"tenant_id": "t"}\n')
    with pytest.raises(BadManifest, match="document_id"):
        records_from_manifest(bad)


def test_job_records_keep_one_tenants_acl_and_resolve_each_tenants_groups_otherwise(tmp_path):
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text('{"tenant_id": "t", "document_id": "a", "source": "a.md", "groups": ["x"]}\n'
                        '{"tenant_id": "u", "document_id": "b", "source": "b.md", "version": 3}\n'
                        '{"tenant_id": "t", "document_id": "c", "source": "c.md", "owner": "ops"}\n')
    jobs = jobs_from_manifest(manifest)
    records, acl = records_from_jobs(jobs)
    rows = records.to_pylist()
    assert acl is None and [(r["tenant_id"], r["document_id"], r["groups"]) for r in rows] == [
        ("t", "a", ["x"]), ("t", "c", []), ("u", "b", [])]
    assert rows[2]["version"] == 3 and rows[1]["owner"] == "ops"
    single = [TenantSources("t", jobs[0].sources, AclSpec.from_groups(["staff"]))]
    records, acl = records_from_jobs(single)
    assert acl == single[0].acl and records.column("groups").to_pylist() == [None, None]
    inline = InlineDocument("d", "d", ParsedDocument(title="d", sections=[], source="d", format="text"))
    with pytest.raises(CitadelError, match="local engine"):
        records_from_jobs([TenantSources("t", (inline,), AclSpec())])



def test_job_records_carry_each_tenants_acl_governance_under_the_requests(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\ntext\n")
    (tmp_path / "b.md").write_text("# B\n\ntext\n")
    [a] = discover([tmp_path / "a.md"])
    [b] = discover([tmp_path / "b.md"])
    stated = dataclasses.replace(a, fields=TrustedFields(governance=Governance(sensitivity="restricted")))
    governed = AclSpec(default=("x",), governance={"a": Governance("P-1", "2", "internal", "short")})
    records, _ = records_from_jobs([TenantSources("t", (stated,), governed), TenantSources("u", (b,), AclSpec())])
    rows = {r["tenant_id"]: r for r in records.to_pylist()}
    # the ACL spec's policy and class, the request's sensitivity over the spec's; the other tenant's none
    assert [rows["t"][k] for k in ("policy_id", "policy_revision", "sensitivity", "retention_class")] == [
        "P-1", "2", "restricted", "short"]
    assert [rows["u"][k] for k in ("policy_id", "sensitivity")] == [None, None]


# ------------------------------------------------------------------------- the stages, no Ray
def _run_stages(config, records, acl, staging, embed_stage=None):
    parsed = ParseChunkStage(config, VersionSnapshot({}), acl)(records)
    embedded = (embed_stage or EmbedStage(config.embedding, "float32", torch_threads=1))(parsed)
    return AssignPartitionStage(str(staging))(embedded)


def test_stages_without_ray_build_the_in_process_segment(make_runtime, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for number in range(3):
        (docs / f"p{number}.md").write_text(GOOD.replace("25", str(20 + number)))
    (docs / "broken.md").write_text("---\ntitle: only front matter\n---\n")
    local = make_runtime()
    acl = AclSpec.from_groups(["staff"])
    local.ingestor().ingest("t", discover([docs]), acl)
    config = load_config(environ={"CITADEL_ANSWER__CONFIRM": "false", "CITADEL_HOME": str(tmp_path / "staged"), "CITADEL_EMBEDDING__BACKEND": "hash"})

    outcomes = _run_stages(config, records_from_paths("t", [docs]), acl, tmp_path / "staging").to_pylist()
    assert [(o["document_id"], o["status"], o["code"]) for o in outcomes] == [
        ("broken", "failed", "no_content"), ("p0", "published", None), ("p1", "published", None),
        ("p2", "published", None)]
    published = [o for o in outcomes if o["status"] == "published"]
    build = TenantBuild("t", tuple({o["file"] for o in published}), frozenset(o["doc_order"] for o in published),
                        None, {})
    built = build_staged_tenant(build, str(config.partitions_dir), config.index, HashEmbedder.model_id, 384, 1)
    local_segment = local.config.partitions_dir / "t" / local.catalog.published_segment("t")
    assert pq.read_table(built.path / "chunks.parquet").equals(pq.read_table(local_segment / "chunks.parquet"))
    np.testing.assert_array_equal(np.load(built.path / "vectors.npy"), np.load(local_segment / "vectors.npy"))


def test_embed_stage_marks_only_the_failing_document(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "leave.md").write_text(GOOD)
    (docs / "poison.md").write_text("# Poison\n\n## Section\n\nPOISON text.\n")
    config = load_config(environ={"CITADEL_ANSWER__CONFIRM": "false", "CITADEL_HOME": str(tmp_path / "home"), "CITADEL_EMBEDDING__BACKEND": "hash"})
    stage = EmbedStage(config.embedding, "float16", torch_threads=1)
    stage._embedder = _PoisonEmbedder()
    outcomes = _run_stages(config, records_from_paths("t", [docs]), AclSpec.from_groups(["s"]), tmp_path / "st",
                           embed_stage=stage).to_pylist()
    assert {o["document_id"]: (o["status"], o["code"]) for o in outcomes} == {
        "leave": ("published", None), "poison": ("failed", "embed_error")}


def test_on_a_cluster_of_small_nodes_an_embed_actor_asks_no_more_than_one_node_has():
    """Three 1-CPU raylets have 3 CPUs, but no node can place a 2.5-CPU actor: the plan would hang."""
    from citadel.config import IngestPipelineConfig
    from indexing.plan import plan_stages

    config = IngestPipelineConfig()
    whole = plan_stages(config, 3.0, 2, 10)
    capped = plan_stages(config, 3.0, 2, 10, node_cpus=1.0)
    assert whole.embed_cpus > 1.0 >= capped.embed_cpus + config.parse_cpus
