"""`citadel jobs list` and `citadel jobs show`: what the catalog records of queued jobs, read back."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from citadel.catalog.sqlite import SQLiteCatalog
from citadel.cli.main import app
from citadel.config import load_config


def test_jobs_are_listed_and_shown_with_their_lease_and_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("CITADEL_HOME", str(tmp_path))
    catalog = SQLiteCatalog(load_config().catalog_path)
    try:
        for tenant in ("acme", "globex"):
            catalog.ensure_tenant(tenant)
        queued = catalog.queue_ingest_job("acme", "memo", {"filename": "memo.md"}, "uploader", 30.0, now=1_000.0)
        catalog.queue_ingest_job("globex", "other", {"filename": "other.md"}, "uploader", 30.0, now=1_001.0)
        catalog.release_job(queued.job_id, "uploader")
        catalog.claim_job("runner-a", 30.0, now=1_002.0)
        catalog.renew_job_lease(queued.job_id, "runner-a", 30.0, now=1_003.0,
                                progress={"stage": "embed", "chunks_done": 64, "chunks_total": 128})
    finally:
        catalog.close()
    runner = CliRunner()
    listed = runner.invoke(app, ["jobs", "list", "--tenant", "acme", "--json"])
    assert listed.exit_code == 0, listed.output
    [job] = json.loads(listed.output)
    assert (job["job_id"], job["status"], job["document_id"], job["version"], job["attempts"]) == (
        queued.job_id, "running", "memo", 1, 1)
    assert job["lease_expires_at"] == 1_033.0 and job["progress"]["chunks_done"] == 64
    assert len(json.loads(runner.invoke(app, ["jobs", "list", "--json"]).output)) == 2
    shown = runner.invoke(app, ["jobs", "show", queued.job_id])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["owner"] == "runner-a"
    missing = runner.invoke(app, ["jobs", "show", "no-such-job"])
    assert missing.exit_code == 1 and "no job" in missing.output
