"""The Ray Data pipeline against the in-process path, re-runs, tiers, dead letters."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from ray_helpers import GOOD, run_pipeline

pytest.importorskip("ray")

from citadel.embedding.fake import HashEmbedder  # noqa: E402
from citadel.ingest.sources import AclSpec, discover  # noqa: E402
from citadel.segments.layout import CHUNKS, VECTORS  # noqa: E402
from citadel.types import Principal  # noqa: E402
from indexing.records import records_from_manifest, records_from_paths  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
STAFF = Principal("t", "s", frozenset({"staff"}))
# The smallest shared handbook, resolved from the repository root.
HANDBOOK = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "corpora" / "github-site-policy"


def _segment(runtime, tenant_id):
    segment = runtime.catalog.published_segment(tenant_id)
    directory = runtime.config.partitions_dir / tenant_id / segment
    return pq.read_table(directory / CHUNKS), np.load(directory / VECTORS)


def _published(runtime, tenant_id):
    return [(d.document_id, d.published_version, d.status, d.title, d.visibility, d.groups,
             tuple(runtime.catalog.manifest(tenant_id, d.document_id, d.published_version)))
            for d in runtime.catalog.list_documents(tenant_id)]


def test_loopback_only(ray_runtime):
    import ray

    assert {node["NodeManagerAddress"] for node in ray.nodes() if node["Alive"]} == {"127.0.0.1"}


def test_pipeline_output_identical_to_in_process(ray_runtime, make_runtime):
    corpus = HANDBOOK.resolve()
    if not corpus.exists():
        pytest.skip(f"shared handbook not found at {corpus}")
    acl = AclSpec.from_groups(["*"])
    local = make_runtime()
    local.config.home = local.config.home.parent / "in-process"
    local_report = local.ingestor().ingest("gh", discover([corpus]), acl)
    ray_report = run_pipeline(ray_runtime, records_from_paths("gh", [corpus]), acl)

    local_table, local_vectors = _segment(local, "gh")
    ray_table, ray_vectors = _segment(ray_runtime, "gh")
    assert local_table.num_rows > 500
    assert ray_table.column("chunk_id").to_pylist() == local_table.column("chunk_id").to_pylist()
    assert ray_table.equals(local_table)  # text, headings, pages, hashes: row for row
    np.testing.assert_allclose(ray_vectors, local_vectors, atol=1e-6)
    assert _published(ray_runtime, "gh") == _published(local, "gh")
    summary = {k: ray_report.to_dict()[k] for k in ("documents", "published", "failed", "chunks", "tier")}
    assert summary == {k: local_report.to_dict()[k] for k in summary}
    letters = [(d["source"], d["code"]) for d in ray_runtime.catalog.dead_letters("gh")]
    assert letters == [(d["source"], d["code"]) for d in local.catalog.dead_letters("gh")]


def test_rerun_is_idempotent(ray_runtime, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for number in range(6):
        (docs / f"policy-{number}.md").write_text(GOOD.replace("25 days", f"{20 + number} days"))
    acl = AclSpec.from_groups(["staff"])
    first = run_pipeline(ray_runtime, records_from_paths("t", [docs]), acl)
    segment = ray_runtime.catalog.published_segment("t")
    manifests_before = _published(ray_runtime, "t")
    second = run_pipeline(ray_runtime, records_from_paths("t", [docs]), acl)

    assert [f.status for f in first.files] == ["published"] * 6
    assert [f.status for f in second.files] == ["unchanged"] * 6
    assert second.to_dict()["chunks"] == 0 and second.status == "succeeded"
    assert ray_runtime.catalog.published_segment("t") == segment  # nothing new published
    assert _published(ray_runtime, "t") == manifests_before
    ids = _segment(ray_runtime, "t")[0].column("chunk_id").to_pylist()
    assert len(ids) == len(set(ids)) == 6

    # An incremental job publishes a delta over that base: one new version, one new document.
    ray_runtime.config.index.delta_min_base_rows = 0
    ray_runtime.config.index.delta_max_fraction = 1.0
    (docs / "policy-0.md").write_text(GOOD.replace("25 days", "33 days"))
    (docs / "policy-9.md").write_text(GOOD.replace("Leave policy", "Sabbatical policy").replace("25 days", "90 days"))
    third = run_pipeline(ray_runtime, records_from_paths("t", [docs]), acl).to_dict()
    assert [(t["segment_kind"], t["new_chunks"], t["rows"]) for t in third["tenant_results"]] == [("delta", 2, 8)]
    partition = ray_runtime.partitions.get("t")
    assert partition.segments[0].directory.name == segment and partition.tombstones == 1
    texts = [p.text for p in ray_runtime.retriever.retrieve(STAFF, "annual leave", top_k=10).passages]
    assert any("33 days" in t for t in texts) and any("90 days" in t for t in texts)
    assert not any("20 days" in t for t in texts)  # policy-0's superseded version


def test_manifest_tenants_land_in_every_tier_with_fp16_embeddings(ray_runtime, tmp_path):
    from citadel.ingest.synth import SynthSpec, generate

    corpus = generate(SynthSpec(tenants=5, chunks=900, seed=3, large=(300, 200)), tmp_path / "corpus")
    hot, cold = corpus.large_tenants
    config = ray_runtime.config
    config.index.tier_overrides = {hot: "hot", cold: "cold"}
    config.ingest_pipeline.embed_dtype = "float16"
    config.ingest_pipeline.tiny_pack_chunks = 250  # the three tiny tenants share build tasks
    report = run_pipeline(ray_runtime, records_from_manifest(corpus.manifest)).to_dict()

    assert report["status"] == "succeeded" and report["failed"] == 0
    assert report["chunks"] == 900 and report["tenants"] == 5
    assert set(report["build_by_tier"]) == {"hot", "cold", "tiny"}
    tiers = {row["tenant_id"]: row["tier"] for row in ray_runtime.catalog.list_tenants()}
    assert tiers[hot] == "hot" and tiers[cold] == "cold"
    for tenant_id, chunks in corpus.tenant_chunks.items():
        table, vectors = _segment(ray_runtime, tenant_id)
        assert table.num_rows == chunks
        texts = [f"{h}\n{t}" for h, t in zip(table.column("context_header").to_pylist(),
                                              table.column("text").to_pylist())]
        exact = HashEmbedder(vectors.shape[1]).embed_passages(texts[:20])
        np.testing.assert_allclose(vectors[:20], exact, atol=2e-3)  # fp16 landing, fp32 segment
    assert not (config.home / "staging").exists() or not any((config.home / "staging").iterdir())


def test_dead_letters_replayed_with_retry_flag(ray_runtime, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from citadel.cli.main import app

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text(GOOD)
    broken = docs / "broken.md"
    broken.write_text("---\ntitle: nothing but front matter\n---\n")
    config = ray_runtime.config
    for name, value in (("CITADEL_HOME", str(config.home)), ("CITADEL_EMBEDDING__BACKEND", "hash"),
                        ("CITADEL_INGEST_PIPELINE__ENGINE", "ray")):
        monkeypatch.setenv(name, value)
    runner = CliRunner()

    result = runner.invoke(app, ["ingest", "--tenant", "t", "--groups", "staff", "--json", str(docs)],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["engine"], report["published"], report["failed"]) == ("raydata", 1, 1)
    assert [letter["code"] for letter in ray_runtime.catalog.dead_letters("t")] == ["no_content"]

    broken.write_text(GOOD.replace("Leave policy", "Broken policy").replace("25 days", "40 days"))
    result = runner.invoke(app, ["ingest", "--retry-dead-letters", "--tenant", "t", "--json"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["published"] == 1
    assert ray_runtime.catalog.dead_letters("t") == []
    texts = [p.text for p in ray_runtime.retriever.retrieve(STAFF, "annual leave").passages]
    assert any("40 days" in text for text in texts) and any("25 days" in text for text in texts)


def test_the_ray_engine_runs_a_many_tenant_job_through_the_protocol(ray_runtime, tmp_path):
    from citadel.cli.ingest_cmd import RAY, make_engine
    from citadel.ingest.engine import IngestEngine
    from citadel.ingest.jobs import jobs_from_manifest
    from indexing.pipeline import RayDataEngine

    ray_runtime.config.ingest_pipeline.engine = RAY
    engine = make_engine(ray_runtime, local=False)  # joins the fixture's instance
    assert isinstance(engine, RayDataEngine) and isinstance(engine, IngestEngine) and engine.name == RAY
    (tmp_path / "a.md").write_text(GOOD)
    (tmp_path / "b.md").write_text(GOOD.replace("25 days", "30 days"))
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text('{"tenant_id": "u", "document_id": "b", "source": "b.md", "groups": ["ops"], "version": 5}\n'
                        '{"tenant_id": "t", "document_id": "a", "source": "a.md", "groups": ["staff"]}\n')
    [report] = engine.run(jobs_from_manifest(manifest))
    summary = report.to_dict()
    assert (summary["engine"], summary["tenants"], summary["published"], summary["status"]) == (
        "raydata", 2, 2, "succeeded")
    published = {t: {d.document_id: (d.published_version, d.groups) for d in ray_runtime.catalog.list_documents(t)}
                 for t in ("t", "u")}
    assert published == {"t": {"a": (1, ("staff",))}, "u": {"b": (5, ("ops",))}}
    assert engine.run([]) == []
