"""Durable ingestion jobs and raw files over HTTP (a fused in-process gateway, its job runner a thread):
an upload answers 202 with a queued job, the runner finishes it, `GET /v1/admin/jobs/{id}` shows its
progress; the raw file opens for a reader of that version and is 404 for anyone else, for another
version and after the withdrawal; and a gateway "restart" (a new app over the same home) finishes a
job whose runner died holding its lease, once the lease ran out."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tests.integration.conftest import make_home
from tests.security.identity_helpers import client_for

DOCUMENT = "vault-memo"
TEXT = "# Vault memo\n\n## Access\n\nThe vault opens with the keycode amber-otter-5521 every Thursday.\n"
EXEC, STAFF = ("exec",), ("staff",)


def _upload(client, home, document: str = DOCUMENT, groups=EXEC) -> dict:
    response = client.post("/v1/admin/tenants/acme/documents", headers=home.admin_headers(),
                           json={"document_id": document, "filename": f"{document}.md", "groups": list(groups),
                                 "text": TEXT})
    assert response.status_code == 202, response.text
    return response.json()


def _job(client, home, job_id: str) -> dict:
    response = client.get(f"/v1/admin/jobs/{job_id}", headers=home.admin_headers())
    assert response.status_code == 200, response.text
    return response.json()


def _raw(client, home, version: int = 1, groups=EXEC, document: str = DOCUMENT):
    return client.get(f"/v1/documents/{document}/versions/{version}/raw", headers=home.headers(groups=groups))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    home = make_home(tmp_path_factory.mktemp("jobs") / "home")
    with client_for(home) as client:
        yield home, client
        client.app.state.services.admin.wait_for_jobs(30)


def test_an_upload_is_queued_and_the_runner_finishes_it_with_its_progress(served):
    home, client = served
    started = _upload(client, home)
    assert started["status"] == "queued" and started["version"] == 1
    client.app.state.services.admin.wait_for_jobs(30)
    job = _job(client, home, started["job_id"])
    assert (job["status"], job["document_id"], job["version"], job["attempts"]) == ("succeeded", DOCUMENT, 1, 1)
    progress = job["progress"]
    assert (progress["stage"], progress["documents_done"], progress["documents_total"]) == ("done", 1, 1)
    assert progress["chunks_done"] == progress["chunks_total"] == job["report"]["chunks"] > 0
    assert progress["engine"] == "local" and job["lease_expires_at"] is None


def test_the_raw_file_opens_for_a_reader_and_is_404_for_everyone_else(served):
    home, client = served
    opened = _raw(client, home)
    assert opened.status_code == 200, opened.text
    assert opened.content == TEXT.encode()
    assert opened.headers["content-type"].startswith("text/markdown")
    assert opened.headers["cache-control"] == "private, no-store"
    assert "objects" not in str(opened.headers) and "raw/" not in str(opened.headers)  # no storage location
    for response in (_raw(client, home, groups=STAFF),  # not shared with staff
                     _raw(client, home, version=2),  # no such version
                     _raw(client, home, document="no-such-document")):
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "not_found"
    assert client.get(f"/v1/documents/{DOCUMENT}/versions/1/raw",
                      headers={"authorization": home.headers()["authorization"]}).status_code == 401


def test_after_the_withdrawal_the_raw_file_is_gone(served):
    home, client = served
    started = _upload(client, home, document="old-memo")
    client.app.state.services.admin.wait_for_jobs(30)
    assert _job(client, home, started["job_id"])["status"] == "succeeded"
    assert _raw(client, home, document="old-memo").status_code == 200
    withdrawn = client.post("/v1/admin/tenants/acme/documents/old-memo/withdraw", headers=home.admin_headers())
    assert withdrawn.status_code == 200 and withdrawn.json()["deleted"]["raw_files"] == 1
    assert _raw(client, home, document="old-memo").status_code == 404
    assert client.app.state.services.admin.objects.list_prefix("raw/acme/old-memo/") == []


def test_a_gateway_restart_finishes_the_job_a_dead_runner_held(tmp_path):
    lease_s = 0.5
    home = make_home(tmp_path / "home", CITADEL_JOBS__EMBEDDED_RUNNER="false", CITADEL_JOBS__LEASE_S=str(lease_s),
                     CITADEL_JOBS__POLL_S="0.05")
    with client_for(home) as first:  # a gateway whose runner claims the job, then dies with it
        job_id = _upload(first, home)["job_id"]
        catalog = first.app.state.services.wiring.catalog
        assert catalog.claim_job("dead-gateway", lease_s, time.time()).job_id == job_id
        assert _job(first, home, job_id)["status"] == "running"
        first.app.state.services.wiring.close()
    restarted = dataclasses.replace(home, config=home.config.model_copy(
        update={"jobs": home.config.jobs.model_copy(update={"embedded_runner": True})}))
    with client_for(restarted) as second:
        deadline = time.monotonic() + 30
        while _job(second, home, job_id)["status"] in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.05)
        job = _job(second, home, job_id)
        assert (job["status"], job["attempts"]) == ("succeeded", 2)  # the dead runner's attempt, then this one's
        assert _raw(second, home).content == TEXT.encode()
        second.app.state.services.admin.runner.stop()
