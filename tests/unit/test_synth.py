"""`citadel synth`: Zipf-like tenant sizes that sum exactly, deterministic documents, exact chunk counts."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from citadel.cli.main import app
from citadel.config import CitadelConfig
from citadel.ingest.sources import AclSpec, SourceFile
from citadel.ingest.steps import PreparedDocument, VersionSnapshot, prepare_document
from citadel.ingest.synth import MANIFEST_NAME, SynthSpec, generate, tenant_sizes


def test_sizes_are_zipf_like_and_sum_exactly():
    sizes = tenant_sizes(SynthSpec(tenants=100, chunks=50_000))
    assert sum(sizes) == 50_000 and len(sizes) == 100
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[0] > 10 * sizes[-1]  # a few large tenants, many small ones
    assert sizes[0] > sizes[1] > sizes[2]


def test_pinned_large_tenants_and_a_cap_on_the_rest():
    sizes = tenant_sizes(SynthSpec(tenants=1000, chunks=1_000_000, large=(60_000, 60_000, 30_000, 30_000),
                                   small_cap=15_000))
    assert sizes[:4] == [60_000, 60_000, 30_000, 30_000]
    assert sum(sizes) == 1_000_000 and len(sizes) == 1000
    assert max(sizes[4:]) <= 15_000 and min(sizes) >= 3


@pytest.mark.parametrize("spec", [SynthSpec(tenants=10, chunks=20), SynthSpec(tenants=2, chunks=100, large=(10, 10, 10)),
                                  SynthSpec(tenants=10, chunks=1000, small_cap=50)])
def test_impossible_specs_are_refused(spec):
    with pytest.raises(ValueError):
        tenant_sizes(spec)


def test_documents_are_deterministic_and_chunk_exactly(tmp_path):
    spec = SynthSpec(tenants=6, chunks=600, seed=5)
    first = generate(spec, tmp_path / "a")
    second = generate(spec, tmp_path / "b")
    manifest = pq.read_table(first.manifest)
    assert manifest.equals(pq.read_table(second.manifest))
    assert sum(manifest.column("chunks").to_pylist()) == 600
    config = CitadelConfig()
    for row in manifest.to_pylist():
        path = first.out_dir / row["source"]
        assert path.read_bytes() == (second.out_dir / row["source"]).read_bytes()
        result = prepare_document(row["tenant_id"], SourceFile(path, row["document_id"], str(path)),
                                  AclSpec.from_groups(row["groups"]), config, VersionSnapshot({}))
        assert isinstance(result, PreparedDocument) and len(result.chunks) == row["chunks"]
    text = (first.out_dir / manifest.column("source")[0].as_py()).read_text()
    assert text.startswith("---\ntitle: ") and "\n## " in text


def test_synth_command_writes_a_manifest(tmp_path):
    result = CliRunner().invoke(app, ["synth", "--tenants", "3", "--chunks", "90", "--out", str(tmp_path), "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["tenants"], summary["chunks"]) == (3, 90)
    assert (tmp_path / MANIFEST_NAME).exists()
