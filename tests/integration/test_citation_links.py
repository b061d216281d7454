"""Citations that open and governance from the trusted catalog, over HTTP (a fused in-process gateway):
a citation's URL opens its section for a reader and is 404 for a user who cannot read the document and
after its withdrawal; the ACL file's policy id, revision, sensitivity and retention class reach the
chunks and the citations whatever the document's own front matter claims; a policy resolves by its id
for a reader only; a retention class past its days withdraws the document."""

from __future__ import annotations

import concurrent.futures
import functools
import urllib.parse

import pytest
from fastapi.testclient import TestClient

from citadel.types import quote_key
from tests.integration.conftest import Home, make_home

# A policy the ACL file governs; its own front matter claims to be public and kept for ever.
HANDBOOK = """---
id: remote-work
title: Remote Work Policy
sensitivity: public
retention_class: forever
policy_id: FAKE-1
---

# Remote Work Policy

## Equipment

Remote employees receive a laptop stipend of 900 EUR every three years. The stipend is paid with the
first salary after the request is approved by the employee's manager.
"""
OLD_MEMO = """# Office Move Memo

## Parking

Parking permits for the old office expire at the end of the lease.
"""
ACL = """default: [staff]
documents:
  office-move: [staff]
governance:
  remote-work: {policy_id: HR-7, policy_revision: "3", sensitivity: confidential, retention_class: standard}
  office-move: {sensitivity: internal, retention_class: short}
"""
REMOTE_WORK_QUESTION = "How much is the laptop stipend for remote employees?"


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Home:
    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.embedding.factory import make_embedder
    from citadel.ingest.local import Ingestor
    from citadel.ingest.sources import AclSpec, TrustedFields, discover

    root = tmp_path_factory.mktemp("citations")
    home = make_home(root / "home")
    docs = root / "docs"
    docs.mkdir()
    (docs / "remote-work.md").write_text(HANDBOOK)
    (docs / "office-move.md").write_text(OLD_MEMO)
    (root / "acl.yaml").write_text(ACL)
    catalog = SQLiteCatalog(home.config.catalog_path)
    # the operator trusts front matter for ids and titles: governance still comes from the ACL file only
    files = discover([docs], trust_front_matter=True)
    files = [f if "office-move" not in f.source else
             type(f)(f.path, f.document_id, f.source, TrustedFields(effective_date="2001-01-01"), True) for f in files]
    Ingestor(catalog, make_embedder(home.config.embedding), home.config).ingest(
        "acme", files, AclSpec.from_file(root / "acl.yaml"))
    catalog.close()
    return home


@pytest.fixture(scope="module")
def client(home):
    from serving.http.api import create_api
    from serving.services.compose import build_services

    app = create_api()
    app.state.services = build_services(home.config)
    app.state.executor = concurrent.futures.ThreadPoolExecutor(2)
    with TestClient(app) as c:
        yield c


def _remote_work_citation(client, home) -> dict:
    response = client.post("/v1/answer", json={"question": REMOTE_WORK_QUESTION}, headers=home.headers())
    assert response.status_code == 200, response.text
    cited = [c for c in response.json()["citations"] if c["document_id"] == "remote-work"]
    assert cited, response.json()
    return cited[0]


def test_governance_from_the_acl_file_reaches_chunks_and_citations_not_the_front_matter(client, home):
    citation = _remote_work_citation(client, home)
    assert (citation["policy_id"], citation["policy_revision"], citation["sensitivity"],
            citation["retention_class"]) == ("HR-7", "3", "confidential", "standard")
    from citadel.retrieval.partitions import PartitionCache
    from citadel.catalog.sqlite import SQLiteCatalog

    catalog = SQLiteCatalog(home.config.catalog_path)
    partition = PartitionCache(catalog, home.config.partitions_dir).get("acme")
    rows = [partition.row(i) for i in range(len(partition))]
    catalog.close()
    governed = {(r["policy_id"], r["sensitivity"], r["retention_class"]) for r in rows
                if r["document_id"] == "remote-work"}
    assert governed == {("HR-7", "confidential", "standard")}  # every chunk, none "public" or "forever"
    assert {r["sensitivity"] for r in rows if r["document_id"] == "travel-policy"} == {None}
    passages = client.post("/v1/retrieve", json={"query": "laptop stipend remote"}, headers=home.headers()).json()
    assert any(p["document_id"] == "remote-work" and p["sensitivity"] == "confidential" for p in passages["passages"])


def test_governance_from_the_admin_api_reaches_the_citation_not_the_content(client, home):
    text = ("---\nsensitivity: public\npolicy_id: FAKE-2\n---\n# Visitor Policy\n\n## Badges\n\n"
            "Every visitor wears a red badge issued by the front desk of the Quillon building.\n")
    upload = {"document_id": "visitors", "filename": "visitors.md", "groups": ["staff"], "text": text,
              "policy_id": "SEC-4", "policy_revision": "2024-1", "sensitivity": "restricted",
              "retention_class": "standard"}
    response = client.post("/v1/admin/tenants/acme/documents", json=upload, headers=home.admin_headers())
    assert response.status_code == 202, response.text
    client.app.state.services.admin.wait_for_jobs(60)
    job = client.get(f"/v1/admin/jobs/{response.json()['job_id']}", headers=home.admin_headers()).json()
    assert job["status"] == "succeeded", job
    passages = client.post("/v1/retrieve", json={"query": "visitor red badge Quillon front desk"},
                           headers=home.headers()).json()["passages"]
    visitor = next(p for p in passages if p["document_id"] == "visitors")
    assert (visitor["policy_id"], visitor["policy_revision"], visitor["sensitivity"], visitor["retention_class"]) == (
        "SEC-4", "2024-1", "restricted", "standard")
    opened = client.get(visitor["url"], headers=home.headers()).json()
    assert (opened["policy_id"], opened["sensitivity"]) == ("SEC-4", "restricted")
    assert client.get("/v1/policies/SEC-4", headers=home.headers()).json()["policy_revision"] == "2024-1"
    # a user's request body names no governance: unknown fields are ignored, never trusted
    answer = client.post("/v1/answer", json={"question": "What colour badge does a visitor wear?",
                                              "sensitivity": "public"}, headers=home.headers()).json()
    assert all(c["sensitivity"] == "restricted" for c in answer["citations"] if c["document_id"] == "visitors")


def test_a_citation_url_opens_its_section_for_a_reader_with_the_quoted_sentence_marked(client, home):
    citation = _remote_work_citation(client, home)
    url = citation["url"]
    sentence = "Remote employees receive a laptop stipend of 900 EUR every three years."
    # the answer quoted that sentence: the URL names it by its key
    assert url == (f"/v1/documents/remote-work/versions/1/sections/{citation['chunk_id']}"
                   f"?quote={quote_key(sentence)}")
    opened = client.get(url, headers=home.headers())
    assert opened.status_code == 200, opened.text
    body = opened.json()
    assert (body["document_id"], body["version"], body["chunk_id"]) == ("remote-work", 1, citation["chunk_id"])
    assert body["heading_path"] == ["Remote Work Policy", "Equipment"] and body["page"] is None
    assert "laptop stipend of 900 EUR" in body["text"] and body["sensitivity"] == "confidential"
    assert body["quote"]["text"] == sentence
    assert body["text"][body["quote"]["start"]:body["quote"]["end"]] == sentence
    assert body["marked_text"].startswith(f"<<{sentence}>>")
    unknown = client.get(f"{body['url']}?quote={'0' * 16}", headers=home.headers()).json()
    assert unknown["quote"] is None and unknown["marked_text"] == unknown["text"] == body["text"]


def test_a_citation_url_is_404_for_a_user_who_cannot_read_it_and_for_a_wrong_chunk(client, home):
    url = _remote_work_citation(client, home)["url"]
    for headers in (home.headers(user="mallory", groups=("contractors",)), home.headers(tenant="globex")):
        response = client.get(url, headers=headers)
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    # an exec-only document's chunk named under a readable document is not opened either
    exec_chunk = urllib.parse.quote("acme:executive-allowance:v1:0000", safe=":")
    response = client.get(f"/v1/documents/remote-work/versions/1/sections/{exec_chunk}", headers=home.headers())
    assert response.status_code == 404
    assert client.get(url.replace("/versions/1/", "/versions/2/"), headers=home.headers()).status_code == 404
    assert client.get(url).status_code == 401  # no identity, no section


def test_a_policy_resolves_by_id_for_a_reader_only(client, home):
    response = client.get("/v1/policies/HR-7", headers=home.headers())
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["policy_id"], body["policy_revision"], body["document_id"], body["version"]) == (
        "HR-7", "3", "remote-work", 1)
    assert body["sensitivity"] == "confidential" and body["title"] == "Remote Work Policy"
    assert client.get("/v1/policies/HR-7", headers=home.headers(user="mallory", groups=("contractors",))
                      ).status_code == 404
    assert client.get("/v1/policies/FAKE-1", headers=home.headers()).status_code == 404  # the front matter's claim
    assert client.get("/v1/policies/NOPE", headers=home.headers()).status_code == 404


def test_a_withdrawn_document_s_citation_is_404_and_a_retention_purge_withdraws_the_expired(client, home):
    from citadel.catalog.retention import purge_expired_documents
    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.embedding.factory import make_embedder
    from citadel.ingest.local import Ingestor
    from citadel.ingest.withdrawal import withdraw_document

    passages = client.post("/v1/retrieve", json={"query": "parking permits old office lease"},
                           headers=home.headers()).json()["passages"]
    memo = next(p for p in passages if p["document_id"] == "office-move")
    assert memo["retention_class"] == "short"
    assert client.get(memo["url"], headers=home.headers()).status_code == 200
    catalog = SQLiteCatalog(home.config.catalog_path)
    try:
        ingestor = Ingestor(catalog, make_embedder(home.config.embedding), home.config)
        withdraw = functools.partial(withdraw_document, catalog, ingestor, home.config.home, home.config.partitions_dir)
        purged = purge_expired_documents(catalog, withdraw, home.config.governance)
        # effective 2001, class `short` (365 days): withdrawn; `standard` (seven years) documents are kept
        assert purged == [{"tenant_id": "acme", "document_id": "office-move", "retention_class": "short"}]
        assert catalog.get_document("acme", "office-move").status == "withdrawn"
        assert catalog.get_document("acme", "remote-work").status == "published"
        assert purge_expired_documents(catalog, withdraw, home.config.governance) == []
    finally:
        catalog.close()
    response = client.get(memo["url"], headers=home.headers())
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
