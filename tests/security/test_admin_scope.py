"""Admin credentials act only in their own tenants, never globally.

Before: any admin credential could upload, withdraw and set ACLs in every tenant, read every tenant's
jobs, and inject faults. Now a tenant admin acts only in its listed tenants (403 `tenant_not_allowed`
elsewhere), another tenant's job is 404 exactly like a missing one (ids cannot be probed), fault
injection is for platform admins (all tenants, granted explicitly) only, and a platform admin can
still do everything. Driven through the HTTP app.
"""

from __future__ import annotations

import pytest

from tests.security.identity_helpers import add_credential, client_for, error_code
from tests.integration.conftest import make_home

NOTE = {"document_id": "northwind-note", "filename": "note.md", "text": "# Note\n\n## Pricing\n\nList prices.\n",
        "groups": ["sales"]}


@pytest.fixture
def setup(tmp_path):
    """Acme ingested; a Northwind document uploaded by the platform admin; a tenant admin of Acme."""
    home = make_home(tmp_path / "home", CITADEL_SERVING__FAULT_INJECTION="true")
    acme_admin = {"authorization": f"Bearer {add_credential(home, 'acme-admin', ['acme'], admin=True)}"}
    with client_for(home) as client:
        upload = client.post("/v1/admin/tenants/northwind/documents", json=NOTE, headers=home.admin_headers())
        assert upload.status_code == 202, upload.text
        client.app.state.services.admin.wait_for_jobs(60)
        job = client.get(f"/v1/admin/jobs/{upload.json()['job_id']}", headers=home.admin_headers()).json()
        assert job["status"] == "succeeded", job
        yield home, client, acme_admin, job["job_id"]
        client.app.state.services.admin.wait_for_jobs(60)


def _refused(response, status: int, code: str) -> None:
    assert (response.status_code, error_code(response)) == (status, code), response.text


def test_a_tenant_admin_cannot_write_in_another_tenant(setup):
    home, client, acme_admin, _ = setup
    _refused(client.post("/v1/admin/tenants/northwind/documents", json={**NOTE, "document_id": "planted"},
                         headers=acme_admin), 403, "tenant_not_allowed")
    _refused(client.put("/v1/admin/tenants/northwind/documents/northwind-note/acl", json={"groups": ["everyone"]},
                        headers=acme_admin), 403, "tenant_not_allowed")
    _refused(client.post("/v1/admin/tenants/northwind/documents/northwind-note/withdraw", headers=acme_admin),
             403, "tenant_not_allowed")
    from citadel.catalog.sqlite import SQLiteCatalog

    catalog = SQLiteCatalog(home.config.catalog_path)
    try:
        document = catalog.get_document("northwind", "northwind-note")
        assert document is not None and catalog.get_document("northwind", "planted") is None
        assert "withdrawn" not in str(document)
    finally:
        catalog.close()


def test_a_tenant_admin_cannot_read_another_tenants_jobs_nor_tell_them_from_missing(setup):
    _, client, acme_admin, northwind_job = setup
    foreign = client.get(f"/v1/admin/jobs/{northwind_job}", headers=acme_admin)
    missing = client.get("/v1/admin/jobs/no-such-job", headers=acme_admin)
    _refused(foreign, 404, "not_found")
    _refused(missing, 404, "not_found")
    assert foreign.json()["error"]["message"].replace(northwind_job, "ID") == \
        missing.json()["error"]["message"].replace("no-such-job", "ID")


def test_a_tenant_admin_still_administers_its_own_tenant(setup):
    _, client, acme_admin, _ = setup
    upload = client.post("/v1/admin/tenants/acme/documents", json={**NOTE, "document_id": "acme-note"},
                         headers=acme_admin)
    assert upload.status_code == 202, upload.text
    client.app.state.services.admin.wait_for_jobs(60)
    assert client.get(f"/v1/admin/jobs/{upload.json()['job_id']}", headers=acme_admin).status_code == 200
    acl = client.put("/v1/admin/tenants/acme/documents/acme-note/acl", json={"groups": ["staff"]}, headers=acme_admin)
    assert acl.status_code == 200, acl.text
    assert client.post("/v1/admin/tenants/acme/documents/acme-note/withdraw", headers=acme_admin).status_code == 200


def test_fault_injection_is_for_platform_admins_only(setup):
    home, client, acme_admin, _ = setup
    _refused(client.get("/v1/admin/faults", headers=acme_admin), 403, "platform_admin_required")
    _refused(client.put("/v1/admin/faults/generator", json={"error_rate": 1.0}, headers=acme_admin),
             403, "platform_admin_required")
    _refused(client.delete("/v1/admin/faults/generator", headers=acme_admin), 403, "platform_admin_required")
    assert client.get("/v1/admin/faults", headers=home.admin_headers()).status_code == 200


def test_a_platform_admin_acts_in_every_tenant(setup):
    home, client, _, northwind_job = setup
    admin = home.admin_headers()
    assert client.get(f"/v1/admin/jobs/{northwind_job}", headers=admin).status_code == 200
    assert client.put("/v1/admin/tenants/northwind/documents/northwind-note/acl", json={"groups": ["finance"]},
                      headers=admin).status_code == 200
    assert client.put("/v1/admin/tenants/acme/documents/expense-policy/acl", json={"groups": ["staff"]},
                      headers=admin).status_code == 200
    assert client.post("/v1/admin/tenants/northwind/documents/northwind-note/withdraw",
                       headers=admin).status_code == 200
