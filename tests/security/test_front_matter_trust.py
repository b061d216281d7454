"""A document's content never decides its own ACL and identity: the request does.

Before: the front matter of any ingested file won over the request. An admin uploading a file whose
front matter said `groups: "*"` made it tenant-wide, `id: other-doc` replaced another document,
`supersedes: other-doc` retired one, and `owner`, `effective_date`, `status` and `version` were the
file's to choose; a directory ingest did the same. Now the document id, groups and visibility,
owner, status, supersedes, effective date and version come from the request (upload body, CLI flags
and ACL spec, a manifest) or the catalog, never from the file; front matter may still give the
title. An operator's directory ingest takes them from front matter only with the explicit per-job
flag (`citadel ingest --trust-front-matter`, `discover(..., trust_front_matter=True)`).

Driven through the HTTP app (an admin's upload) and the Ingestor (a directory).
"""

from __future__ import annotations

import concurrent.futures

import pytest
from fastapi.testclient import TestClient

from citadel.ingest.sources import AclSpec, discover
from citadel.types import Principal
from tests.integration.conftest import make_home

# The attack: an innocent-looking upload whose front matter claims another document's identity,
# tenant-wide visibility, a predecessor to retire, an owner, a date and a version.
PLANTED = """---
title: Quarterly parking note
id: expense-policy
groups: "*"
supersedes: travel-policy
owner: mallory@evil.example
effective_date: 2099-01-01
version: 99
---
# Parking note

## Garage

The quokka garage code is 4417 and only executives may know it.
"""


def _client(home) -> TestClient:
    from serving.http.api import create_api
    from serving.services.compose import build_services

    app = create_api()
    app.state.services = build_services(home.config)
    app.state.executor = concurrent.futures.ThreadPoolExecutor(4)
    return TestClient(app, raise_server_exceptions=False)


def _upload(client, home, body: dict) -> dict:
    response = client.post("/v1/admin/tenants/acme/documents", json=body, headers=home.admin_headers())
    assert response.status_code == 202, response.text
    client.app.state.services.admin.wait_for_jobs(60)
    return client.get(f"/v1/admin/jobs/{response.json()['job_id']}", headers=home.admin_headers()).json()


@pytest.fixture
def api(tmp_path):
    home = make_home(tmp_path / "home")
    with _client(home) as client:
        yield home, client
        client.app.state.services.admin.wait_for_jobs(60)


def test_an_uploaded_files_front_matter_sets_neither_its_acl_nor_its_identity(api):
    home, client = api
    catalog = client.app.state.services.wiring.catalog
    expense_before = catalog.get_document("acme", "expense-policy")
    travel_before = catalog.get_document("acme", "travel-policy")
    assert expense_before.status == "published" and travel_before.status == "published"

    job = _upload(client, home, {"document_id": "parking-note", "filename": "parking-note.md", "text": PLANTED,
                                 "groups": ["exec"]})
    assert job["status"] == "succeeded", job

    note = catalog.get_document("acme", "parking-note")  # the request's id, not the file's
    assert note is not None and note.status == "published"
    assert note.title == "Quarterly parking note"  # the title is display text: front matter may give it
    assert (note.visibility, note.groups) == ("groups", ("exec",))  # the request's groups, not "*"
    assert (note.owner, note.supersedes, note.effective_date) == ("", None, None)
    assert note.published_version == 1  # not the file's `version: 99`
    # The documents the file named are untouched: not replaced, not retired.
    assert catalog.get_document("acme", "expense-policy") == expense_before
    assert catalog.get_document("acme", "travel-policy") == travel_before

    staff = {"query": "quokka garage code"}
    passages = client.post("/v1/retrieve", json=staff, headers=home.headers(groups=("staff",))).json()["passages"]
    assert all(p["document_id"] != "parking-note" for p in passages)  # not tenant-wide
    passages = client.post("/v1/retrieve", json=staff, headers=home.headers(groups=("exec",))).json()["passages"]
    assert passages and passages[0]["document_id"] == "parking-note"


def test_an_upload_states_trusted_fields_in_its_body_and_they_are_checked(api):
    home, client = api
    catalog = client.app.state.services.wiring.catalog
    body = {"document_id": "parking-2027", "filename": "p.md", "text": "# Parking\n\n## Rule\n\nPark nowhere.\n",
            "groups": ["staff"], "owner": "facilities@acme.example", "effective_date": "2027-01-01",
            "supersedes": "expense-policy"}
    for bad in ({"effective_date": "2027-02-30"}, {"effective_date": "Jan 1"}, {"status": "Draft v2"},
                {"supersedes": "no-such-document"}, {"supersedes": "parking-2027"}):
        response = client.post("/v1/admin/tenants/acme/documents", json={**body, **bad}, headers=home.admin_headers())
        assert response.status_code == 422, (bad, response.text)
    job = _upload(client, home, body)
    assert job["status"] == "succeeded", job
    record = catalog.get_document("acme", "parking-2027")
    assert (record.owner, record.effective_date, record.supersedes) == ("facilities@acme.example", "2027-01-01",
                                                                       "expense-policy")
    assert catalog.get_document("acme", "expense-policy").status == "superseded"
    # A status from the request decides approval; the file's own `status:` does not.
    job = _upload(client, home, {**body, "document_id": "draft-note", "supersedes": None, "status": "draft",
                                 "text": "---\nstatus: published\n---\n# Draft\n\n## A\n\nNot yet.\n"})
    assert [(f["status"], f.get("code")) for f in job["report"]["files"]] == [("skipped", "not_approved")]
    job = _upload(client, home, {**body, "document_id": "marked-draft", "supersedes": None,
                                 "text": "---\nstatus: draft\n---\n# Marked\n\n## A\n\nReady.\n"})
    assert catalog.get_document("acme", "marked-draft").status == "published"


# ----------------------------------------------------------------------------- directory ingest
VICTIMS = {
    "other-doc.md": "# Other document\n\n## Body\n\nThe kiwi orchard opens at dawn.\n",
    "older-policy.md": "# Older policy\n\n## Body\n\nThe mango rule applies.\n",
}
DIRECTORY_PLANTED = """---
title: Planted page
id: other-doc
groups: "*"
supersedes: older-policy
owner: mallory@evil.example
effective_date: 2099-01-01
status: published
version: 7
---
# Planted page

## Body

The papaya vault combination is 9921.
"""
NOBODY = Principal("t", "nobody", frozenset({"nobody"}))


def _write(directory, files: dict[str, str]):
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def _ingest_victims_then_planted(runtime, tmp_path, **discover_options):
    acl = AclSpec.from_groups(["staff"])
    runtime.ingestor().ingest("t", discover([_write(tmp_path / "victims", VICTIMS)]), acl)
    planted = _write(tmp_path / "incoming", {"planted.md": DIRECTORY_PLANTED})
    return runtime.ingestor().ingest("t", discover([planted], **discover_options), acl)


def test_a_directory_ingest_ignores_front_matter_identity_and_acl(make_runtime, tmp_path):
    runtime = make_runtime()
    report = _ingest_victims_then_planted(runtime, tmp_path)
    assert [(f.document_id, f.status) for f in report.files] == [("planted", "published")]
    catalog = runtime.catalog
    planted = catalog.get_document("t", "planted")  # the path's id, not `id: other-doc`
    assert (planted.visibility, planted.groups) == ("groups", ("staff",))  # the ACL spec's, not "*"
    assert (planted.owner, planted.supersedes, planted.effective_date) == ("", None, None)
    assert planted.published_version == 1 and planted.title == "Planted page"
    other = catalog.get_document("t", "other-doc")
    assert (other.status, other.published_version, other.title) == ("published", 1, "Other document")
    assert catalog.get_document("t", "older-policy").status == "published"
    assert not runtime.retriever.retrieve(NOBODY, "papaya vault combination").passages


def test_an_operator_may_trust_front_matter_explicitly_per_job(make_runtime, tmp_path):
    runtime = make_runtime()
    report = _ingest_victims_then_planted(runtime, tmp_path, trust_front_matter=True)
    assert [(f.document_id, f.status) for f in report.files] == [("other-doc", "published")]
    catalog = runtime.catalog
    other = catalog.get_document("t", "other-doc")
    assert (other.title, other.visibility, other.published_version) == ("Planted page", "tenant", 7)
    assert (other.owner, other.effective_date, other.supersedes) == ("mallory@evil.example", "2099-01-01",
                                                                     "older-policy")
    assert catalog.get_document("t", "older-policy").status == "superseded"
    assert catalog.get_document("t", "planted") is None
