"""ACL-scoped retrieval: nothing outside the principal's readable set ever comes back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from citadel.ingest.sources import AclSpec, discover
from citadel.types import Principal

PLANTED = "The quartz heron ledger authorises seventeen violet submarines every Thursday"
TOPICS = ["travel", "expenses", "security", "hiring", "benefits", "laptops", "onboarding", "holidays"]


def write_corpus(root: Path, tenant: str, documents: int, planted: bool = False) -> Path:
    """Small Markdown documents with headings; optionally one with the planted sentence."""
    directory = root / tenant
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(documents):
        topic = TOPICS[i % len(TOPICS)]
        body = "\n\n".join(
            f"## {topic.title()} rule {j}\n\nEmployees of {tenant} follow {topic} rule {j} of document {i}: "
            f"approval is needed for {topic} items above {10 * (j + 1)} units." for j in range(3)
        )
        (directory / f"{topic}-{i}.md").write_text(f"# {topic.title()} policy {i}\n\n{body}\n")
    if planted:
        (directory / "planted.md").write_text(f"# Secret ledger\n\n## Planted\n\n{PLANTED}.\n")
    return directory


ALL_TIERS = ["tiny", "hot", "cold"]


def _runtime(make_runtime, tier: str, force_ann: bool):
    retrieval = {"exact_max_readable": 0, "exact_max_fraction": 0.0} if force_ann else {}
    overrides = {"index": {"tier_overrides": {"a": tier, "b": tier}}, "retrieval": retrieval}
    return make_runtime(**overrides)


@pytest.mark.parametrize("tier", ALL_TIERS)
def test_planted_sentence_in_tenant_b_never_reaches_tenant_a(make_runtime, tmp_path, tier):
    runtime = _runtime(make_runtime, tier, force_ann=True)
    ingest = runtime.ingestor()
    ingest.ingest("a", discover([write_corpus(tmp_path / "docs", "a", 12)]), AclSpec.from_groups(["staff"]))
    ingest.ingest("b", discover([write_corpus(tmp_path / "docs", "b", 12, planted=True)]),
                  AclSpec.from_groups(["staff"]))
    principal_b = Principal("b", "bob", frozenset({"staff"}))
    assert runtime.retriever.retrieve(principal_b, PLANTED).passages[0].document_id == "planted"

    principal_a = Principal("a", "alice", frozenset({"staff"}))
    for query in (PLANTED, "quartz heron ledger", "violet submarines Thursday"):
        result = runtime.retriever.retrieve(principal_a, query, top_k=50)
        assert result.passages, "tenant A still gets its own passages"
        assert all(p.chunk_id.startswith("a:") for p in result.passages)
        partition, allowed = runtime.retriever.scope(principal_a)
        legs = runtime.retriever.legs(partition, query, allowed, "ann", [], {})
        rows = legs.vector + legs.keyword
        assert all(partition.row(r)["chunk_id"].startswith("a:") for r in rows)


@pytest.mark.parametrize("tier", ALL_TIERS)
@pytest.mark.parametrize("force_ann", [False, True])
def test_restricted_document_invisible_in_both_legs(make_runtime, tmp_path, tier, force_ann):
    runtime = _runtime(make_runtime, tier, force_ann)
    corpus = write_corpus(tmp_path / "docs", "a", 16, planted=True)
    acl = AclSpec(default=("staff",), documents={"planted": ("exec",)})
    runtime.ingestor().ingest("a", discover([corpus]), acl)
    staff = Principal("a", "s", frozenset({"staff"}))
    partition, allowed = runtime.retriever.scope(staff)
    plan = runtime.retriever.plan(len(allowed), len(partition))
    assert plan == ("ann" if force_ann else "exact")
    # the planted words plus words every readable document has, so both legs have candidates
    legs = runtime.retriever.legs(partition, PLANTED + " travel approval", allowed, plan, [], {})
    assert legs.vector and legs.keyword
    assert all(partition.row(r)["document_id"] != "planted" for r in legs.vector + legs.keyword)
    assert set(legs.vector + legs.keyword) <= set(allowed.tolist())
    exec_user = Principal("a", "e", frozenset({"exec"}))
    assert [p.document_id for p in runtime.retriever.retrieve(exec_user, PLANTED).passages] == ["planted"]


def test_revocation_and_withdrawal_apply_on_next_query(make_runtime, tmp_path):
    runtime = make_runtime()
    runtime.ingestor().ingest("a", discover([write_corpus(tmp_path / "docs", "a", 4, planted=True)]),
                              AclSpec.from_groups(["staff"]))
    staff = Principal("a", "s", frozenset({"staff"}))
    segment = runtime.catalog.published_segment("a")
    assert runtime.retriever.retrieve(staff, PLANTED).passages[0].document_id == "planted"

    runtime.catalog.set_acl("a", "planted", ["exec"], actor="test")
    assert all(p.document_id != "planted" for p in runtime.retriever.retrieve(staff, PLANTED).passages)
    runtime.catalog.set_acl("a", "planted", ["staff"], actor="test")
    assert runtime.retriever.retrieve(staff, PLANTED).passages[0].document_id == "planted"

    runtime.catalog.withdraw("a", "planted", actor="test")
    assert all(p.document_id != "planted" for p in runtime.retriever.retrieve(staff, PLANTED).passages)
    assert runtime.catalog.published_segment("a") == segment, "no re-indexing happened"


def test_superseded_versions_never_returned(make_runtime, tmp_path):
    runtime = make_runtime()
    docs = tmp_path / "docs"
    docs.mkdir()
    policy = docs / "hotel.md"
    policy.write_text("# Hotel policy\n\n## Limit\n\nThe hotel limit is 180 USD per night.\n")
    acl = AclSpec.from_groups(["staff"])
    runtime.ingestor().ingest("a", discover([docs]), acl)
    policy.write_text("# Hotel policy\n\n## Limit\n\nThe hotel limit is 220 USD per night.\n")
    report = runtime.ingestor().ingest("a", discover([docs]), acl)
    assert report.files[0].version == 2
    staff = Principal("a", "s", frozenset({"staff"}))
    for query in ("hotel limit 180 USD per night", "hotel limit 220 USD"):
        passages = runtime.retriever.retrieve(staff, query, top_k=50).passages
        assert passages and all(p.version == 2 and "220" in p.text for p in passages)
    # compaction: the next build no longer carries v1 rows at all
    partition = runtime.partitions.get("a")
    assert "a:hotel:v1:0000" not in partition.table.column("chunk_id").to_pylist()


def test_live_recheck_drops_a_passage_revoked_mid_request(make_runtime, tmp_path):
    runtime = make_runtime()
    runtime.ingestor().ingest("a", discover([write_corpus(tmp_path / "docs", "a", 4, planted=True)]),
                              AclSpec.from_groups(["staff"]))
    catalog = runtime.catalog
    original = catalog.readable_documents
    calls = {"n": 0}

    def revoke_after_scope(principal):
        calls["n"] += 1
        if calls["n"] == 2:  # the scope was computed; now revoke before the live check
            catalog.set_acl("a", "planted", ["exec"], actor="test")
        return original(principal)

    catalog.readable_documents = revoke_after_scope
    passages = runtime.retriever.retrieve(Principal("a", "s", frozenset({"staff"})), PLANTED).passages
    assert calls["n"] >= 2
    assert all(p.document_id != "planted" for p in passages)


def test_passage_fields_and_cap_per_document(make_runtime, tmp_path):
    runtime = make_runtime()
    runtime.ingestor().ingest("a", discover([write_corpus(tmp_path / "docs", "a", 8)]), AclSpec.from_groups(["*"]))
    result = runtime.retriever.retrieve(Principal("a", "anyone", frozenset()), "travel rule approval", top_k=20)
    assert result.passages
    counts: dict[str, int] = {}
    for p in result.passages:
        counts[p.document_id] = counts.get(p.document_id, 0) + 1
        assert p.chunk_id.startswith(f"a:{p.document_id}:v1:")
        assert p.heading and p.source.endswith(".md") and p.title
    assert max(counts.values()) <= 2
    payload = result.to_dict()
    assert set(payload) == {"request_id", "plan", "degraded", "passages"}
    assert set(payload["passages"][0]) == {"chunk_id", "text", "document_id", "title", "version", "heading",
                                           "page", "source", "score", "policy_id", "policy_revision",
                                           "sensitivity", "retention_class", "url"}


def test_no_groups_means_nothing_readable(make_runtime, tmp_path):
    runtime = make_runtime()
    runtime.ingestor().ingest("a", discover([write_corpus(tmp_path / "docs", "a", 2)]), AclSpec.from_groups(["staff"]))
    assert runtime.retriever.retrieve(Principal("a", "x", frozenset()), "travel").passages == []
    assert runtime.retriever.retrieve(Principal("zzz", "x", frozenset({"staff"})), "travel").passages == []
