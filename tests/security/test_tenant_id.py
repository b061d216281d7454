"""Tenant ids are validated in the core, at every entry point, not only at the HTTP edge.

A tenant `..` or `.` from the CLI or a manifest named a directory outside `partitions/<tenant>/`, and
the publish's pruning then deleted every other tenant's segments; the HTTP name check (`re.match`
with `$`) accepted a trailing newline. Now one validated tenant id (a full match of plain lower-case
ASCII) is checked at every entry point and before any path is formed, so a bad id is refused with
`invalid_tenant` and another tenant's data always survives.

Safety: the ids tried through the filesystem here stay inside the test's temporary directory even
on the unfixed code (no absolute paths such as `/`, which that code would have pruned); `/` is tried
only where no path is formed.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from citadel.catalog.sqlite import SQLiteCatalog
from citadel.errors import CitadelError
from citadel.ingest.sources import AclSpec, discover
from citadel.types import Principal

DOC = "# Hotel policy\n\n## Limit\n\nThe hotel limit is 220 USD per night.\n"
VICTIM = "acme"

# Ids that stay inside the test's temporary directory whatever the code does with them.
CONTAINED_BAD_IDS = [
    "..",
    ".",
    "",
    "a/../b",
    "a/b",
    "acme\n",  # a trailing newline: what `$` accepts
    "a\x00b",
    "\u0430cme",  # Cyrillic 'а' in place of the Latin 'a'
    "\uff41\uff43\uff4d\uff45",  # fullwidth 'ａｃｍｅ'
    "Acme",  # upper case: two tenants on a case-insensitive filesystem
    "a" * 64,  # longer than 63 characters
]
BAD_IDS = CONTAINED_BAD_IDS + ["/", "../acme", "acme/..", " acme", "acme ", "a:b", "a\tb", "-acme", "_acme"]
GOOD_IDS = ["acme", "18f", "civicactions", "t0001", "tenant-00001", "beir-scifact", "squad2-dev", "t", "a.b_c-d",
            "a" * 63]


def _code(error: BaseException) -> str | None:
    return getattr(error, "code", None)


@pytest.mark.parametrize("tenant", BAD_IDS, ids=repr)
def test_the_catalog_refuses_a_bad_tenant_id(tmp_path, tenant):
    catalog = SQLiteCatalog(tmp_path / "catalog.sqlite")
    with pytest.raises(CitadelError) as raised:
        catalog.ensure_tenant(tenant)
    assert _code(raised.value) == "invalid_tenant"
    assert catalog.list_tenants() == []
    catalog.close()


@pytest.mark.parametrize("tenant", BAD_IDS, ids=repr)
def test_a_principal_cannot_name_a_bad_tenant(tenant):
    with pytest.raises(CitadelError) as raised:
        Principal(tenant, "alice", frozenset({"staff"}))
    assert _code(raised.value) == "invalid_tenant"


@pytest.mark.parametrize("tenant", BAD_IDS, ids=repr)
def test_loading_a_partition_refuses_a_bad_tenant(make_runtime, tenant):
    with pytest.raises(CitadelError) as raised:
        make_runtime().partitions.get(tenant)
    assert _code(raised.value) == "invalid_tenant"


@pytest.mark.parametrize("tenant", CONTAINED_BAD_IDS, ids=repr)
def test_the_tenant_lock_forms_no_path_for_a_bad_tenant(tmp_path, tenant):
    from citadel.ingest.steps import tenant_lock

    with pytest.raises(CitadelError) as raised:
        with tenant_lock(tmp_path / "home" / "partitions", tenant):
            pass
    assert _code(raised.value) == "invalid_tenant"
    assert list(tmp_path.rglob("*")) == []


@pytest.mark.parametrize("tenant", GOOD_IDS)
def test_the_tenants_in_use_stay_valid(tmp_path, tenant):
    catalog = SQLiteCatalog(tmp_path / "catalog.sqlite")
    catalog.ensure_tenant(tenant)
    assert [row["tenant_id"] for row in catalog.list_tenants()] == [tenant]
    assert Principal(tenant, "alice", frozenset()).tenant_id == tenant
    catalog.close()


def _snapshot(root) -> set[str]:
    """Every path under `root`, relative to it (what a bad ingest must not change)."""
    return {str(path.relative_to(root)) for path in root.rglob("*") if ".lock" not in path.name}


@pytest.mark.parametrize("tenant", CONTAINED_BAD_IDS, ids=repr)
def test_a_bad_tenant_neither_publishes_nor_prunes_another_tenants_segments(make_runtime, tmp_path, tenant):
    runtime = make_runtime()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "hotel.md").write_text(DOC)
    runtime.ingestor().ingest(VICTIM, discover([docs]), AclSpec.from_groups(["staff"]))
    victim_dir = runtime.config.partitions_dir / VICTIM / runtime.catalog.published_segment(VICTIM)
    home = runtime.config.home
    before = _snapshot(home)

    try:
        runtime.ingestor().ingest(tenant, discover([docs]), AclSpec.from_groups(["staff"]))
        error = None
    except Exception as raised:  # noqa: BLE001 (checked below, after the victim's data)
        error = raised

    assert victim_dir.is_dir(), "the victim tenant's published segment was pruned"
    assert _snapshot(home) - before <= {"catalog.sqlite-shm", "catalog.sqlite-wal"}, "something was written"
    assert before - _snapshot(home) == set(), "something was deleted"
    assert [row["tenant_id"] for row in runtime.catalog.list_tenants()] == [VICTIM]
    staff = Principal(VICTIM, "u", frozenset({"staff"}))
    assert [p.document_id for p in runtime.retriever.retrieve(staff, "hotel limit").passages] == ["hotel"]
    assert isinstance(error, CitadelError) and _code(error) == "invalid_tenant", repr(error)


@pytest.mark.parametrize("tenant", ["..", "acme\n"], ids=repr)
def test_compact_refuses_a_bad_tenant(make_runtime, tenant):
    runtime = make_runtime()
    with pytest.raises(CitadelError) as raised:
        runtime.ingestor().compact(tenant)
    assert _code(raised.value) == "invalid_tenant"


@pytest.fixture
def cli(tmp_path, monkeypatch):
    from citadel.cli.main import app

    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CITADEL_EMBEDDING__BACKEND", "hash")
    monkeypatch.setenv("CITADEL_INGEST_PIPELINE__ENGINE", "local")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args), catch_exceptions=True)


@pytest.mark.parametrize("tenant", ["..", ".", "acme\n", "\u0430cme"], ids=repr)
def test_the_cli_refuses_a_bad_tenant_and_the_victim_survives(cli, tmp_path, tenant):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "hotel.md").write_text(DOC)
    assert cli("ingest", "--tenant", VICTIM, "--groups", "staff", str(docs)).exit_code == 0
    partitions = tmp_path / "home" / "partitions"
    victim_segments = sorted(p.name for p in (partitions / VICTIM).iterdir() if p.is_dir())

    result = cli("ingest", "--tenant", tenant, "--groups", "staff", str(docs))

    assert result.exit_code == 2, result.output
    assert "invalid tenant id" in result.output
    assert sorted(p.name for p in (partitions / VICTIM).iterdir() if p.is_dir()) == victim_segments
    tenants = json.loads(cli("tenants", "--json").stdout)
    assert [row["tenant_id"] for row in tenants] == [VICTIM]


def test_a_manifest_naming_a_bad_tenant_is_refused(cli, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "hotel.md").write_text(DOC)
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text(json.dumps({"tenant_id": "..", "document_id": "hotel", "source": str(docs / "hotel.md"),
                                    "groups": ["staff"]}) + "\n")

    result = cli("ingest", "--local", "--manifest", str(manifest))

    assert result.exit_code == 2, result.output
    assert "invalid tenant id" in result.output
    assert not any((tmp_path / "home").glob("*/manifest.json")), "a segment was built outside partitions/"


@pytest.fixture
def served(tmp_path):
    """(home, client) over the HTTP app, with the Acme example ingested."""
    import concurrent.futures

    from fastapi.testclient import TestClient

    from serving.http.api import create_api
    from serving.services.compose import build_services
    from tests.integration.conftest import make_home

    home = make_home(tmp_path / "home")
    app = create_api()
    app.state.services = build_services(home.config)
    app.state.executor = concurrent.futures.ThreadPoolExecutor(2)
    with TestClient(app) as client:
        yield home, client
        app.state.services.admin.wait_for_jobs(30)


@pytest.mark.parametrize("method, path", [
    ("post", "/v1/admin/tenants/acme%0A/documents"),
    ("post", "/v1/admin/tenants/Acme/documents"),
    ("post", "/v1/admin/tenants/acme%0A/documents/hotel/withdraw"),
    ("put", "/v1/admin/tenants/%D0%B0cme/documents/hotel/acl"),
], ids=lambda value: value if value in ("post", "put") else value.split("/")[4])
def test_an_admin_route_refuses_a_bad_tenant(served, method, path):
    home, client = served
    body = ({"document_id": "hotel", "filename": "hotel.md", "text": DOC, "groups": ["staff"]}
            if path.endswith("documents") else {"groups": ["staff"]})
    response = getattr(client, method)(path, json=body, headers=home.admin_headers())
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_tenant"
    assert not (home.config.home / "objects").exists() or not any((home.config.home / "objects").iterdir())


@pytest.mark.parametrize("tenant", ["..", "Acme", "\u0430cme", "acme/.."], ids=repr)
def test_a_signed_user_context_for_a_bad_tenant_is_refused(served, tenant):
    from tests.security.identity_helpers import forged_context

    home, client = served
    context = forged_context(home, "app", "app", tenant=tenant)  # validly signed by the calling service
    response = client.post("/v1/retrieve", json={"query": "hotel"},
                           headers={"authorization": f"Bearer {home.service_token}", "x-citadel-user-context": context})
    # refused as a malformed context (the verifier) or an invalid tenant (the Principal): never served
    assert response.status_code in (400, 401), response.text
    assert (response.status_code, response.json()["error"]["code"]) in {(400, "invalid_tenant"),
                                                                         (401, "invalid_user_context")}
