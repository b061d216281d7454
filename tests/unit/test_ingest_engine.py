"""The engine choice of `citadel ingest` and the local engine behind the IngestEngine protocol (no Ray
here: the Ray Data engine is tested under tests/ray)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from citadel.cli import ingest_cmd
from citadel.cli.ingest_cmd import LOCAL, RAY, UsageError, choose_engine, make_engine
from citadel.cli.main import app
from citadel.ingest.engine import DuplicateDocuments, IngestEngine, TenantSources
from citadel.ingest.jobs import jobs_from_dead_letters, jobs_from_manifest, jobs_from_paths
from citadel.ingest.local import Ingestor
from citadel.ingest.report import JobReport
from citadel.ingest.sources import AclSpec

DOC = "# Hotel policy\n\n## Limit\n\nThe hotel limit is {limit} USD per night.\n"


def _doc(path, limit=220):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DOC.format(limit=limit))
    return path


def test_the_engine_is_chosen_in_one_place(make_runtime, monkeypatch):
    runtime = make_runtime()
    assert choose_engine(runtime, local=True) == LOCAL
    runtime.config.ingest_pipeline.engine = "local"
    assert choose_engine(runtime, local=False) == LOCAL
    monkeypatch.setattr(ingest_cmd.importlib.util, "find_spec", lambda name: None)  # no ray installed
    runtime.config.ingest_pipeline.engine = "auto"
    assert choose_engine(runtime, local=False) == LOCAL
    runtime.config.ingest_pipeline.engine = RAY
    with pytest.raises(UsageError, match="ray is not installed"):
        make_engine(runtime, local=False)


def test_the_local_engine_implements_the_protocol(make_runtime):
    engine = make_engine(make_runtime(), local=True)
    assert isinstance(engine, Ingestor) and isinstance(engine, IngestEngine) and engine.name == LOCAL
    assert engine.run([]) == []


def test_the_local_engine_runs_a_many_tenant_job_with_requested_versions(make_runtime, tmp_path):
    runtime = make_runtime()
    _doc(tmp_path / "a.md"), _doc(tmp_path / "b.md", 180)
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text('{"tenant_id": "u", "document_id": "b", "source": "b.md", "groups": ["ops"], "version": 4}\n'
                        '{"tenant_id": "t", "document_id": "a", "source": "a.md", "groups": ["staff"]}\n')
    reports = make_engine(runtime, local=True).run(jobs_from_manifest(manifest))
    assert all(isinstance(r, JobReport) for r in reports)
    assert [(r.tenant_id, r.status, r.files[0].version) for r in reports] == [("t", "succeeded", 1),
                                                                             ("u", "succeeded", 4)]
    documents = {d.document_id: d for d in runtime.catalog.list_documents("u")}
    assert documents["b"].published_version == 4


def test_a_job_naming_a_document_twice_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    _doc(tmp_path / "docs" / "a.md"), _doc(tmp_path / "docs" / "a.txt")  # both become document "a"
    with pytest.raises(DuplicateDocuments, match="t:a"):
        jobs_from_paths("t", [tmp_path / "docs"], AclSpec.from_groups(["staff"]))
    result = CliRunner().invoke(app, ["ingest", "--local", "--tenant", "t", "--groups", "staff",
                                      str(tmp_path / "docs")])
    assert result.exit_code == 2 and "more than once" in result.output


def test_a_replay_covers_every_tenant_and_each_document_once(make_runtime, tmp_path):
    runtime = make_runtime()
    broken = tmp_path / "broken.md"
    for tenant, job in (("t", "j1"), ("t", "j2"), ("u", "j3")):
        runtime.catalog.ensure_tenant(tenant)
        runtime.catalog.add_dead_letter(job, tenant, str(broken), "unreadable", "missing",
                                        {"document_id": "broken", "groups": [job]})
    jobs, letter_ids = jobs_from_dead_letters(runtime.catalog, None)
    assert len(letter_ids) == 3
    assert [(j.tenant_id, [s.document_id for s in j.sources], j.acl.documents) for j in jobs] == [
        ("t", ["broken"], {"broken": ("j2",)}), ("u", ["broken"], {"broken": ("j3",)})]
    assert all(isinstance(j, TenantSources) for j in jobs)


def test_the_cli_runs_one_path_for_the_local_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CITADEL_EMBEDDING__BACKEND", "hash")
    _doc(tmp_path / "docs" / "hotel.md")
    result = CliRunner().invoke(app, ["ingest", "--local", "--tenant", "t", "--groups", "staff", "--json",
                                      str(tmp_path / "docs")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["tenant_id"], report["published"], report["segment_kind"]) == ("t", 1, "base")
    assert report["rebuild_reason"] == "first_build"
