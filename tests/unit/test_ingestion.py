"""Ingestion: bad input is dead-lettered with a reason, the rest publishes, nothing is half-visible."""

from __future__ import annotations

import os

import pytest

from citadel.ingest.sources import AclSpec, discover
from citadel.types import Principal

STAFF = Principal("t", "s", frozenset({"staff"}))
GOOD = "# Leave policy\n\n## Annual leave\n\nStaff receive 25 days of annual leave each year.\n"


def _bad_inputs(directory):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "good.md").write_text(GOOD)
    (directory / "empty.md").write_bytes(b"")
    (directory / "random.pdf").write_bytes(os.urandom(4096))
    (directory / "invalid-utf8.md").write_bytes(b"# Title\n\nbad \xff\xfe bytes here\n")
    (directory / "no-text.md").write_text("---\ntitle: Moved\nredirect_to: /elsewhere/\n---\n")
    (directory / "no-headings.md").write_text("just a paragraph with no heading and no title at all.\n")
    with open(directory / "huge.txt", "wb") as handle:
        handle.truncate(50 * 1024 * 1024)  # a 50 MB (sparse) file
    return directory


def test_bad_inputs_are_dead_lettered_and_the_rest_published(make_runtime, tmp_path):
    runtime = make_runtime()
    report = runtime.ingestor().ingest("t", discover([_bad_inputs(tmp_path / "docs")]), AclSpec.from_groups(["staff"]))
    outcomes = {f.document_id: f for f in report.files}
    assert outcomes["good"].status == "published"
    assert outcomes["no-headings"].status == "published"  # a page with no heading is a document
    expected_codes = {"empty": "input_rejected", "random": "pdf_unreadable", "invalid-utf8": "invalid_utf8",
                      "no-text": "no_content", "huge": "input_rejected"}
    for document_id, code in expected_codes.items():
        outcome = outcomes[document_id]
        assert outcome.status == "failed", document_id
        assert outcome.code == code, (document_id, outcome.code, outcome.reason)
        assert outcome.reason and outcome.dead_letter_id
    assert "50" in outcomes["huge"].reason or "52,428,800" in outcomes["huge"].reason
    letters = runtime.catalog.dead_letters("t")
    assert {letter["meta"]["document_id"] for letter in letters} == set(expected_codes)
    assert report.status == "partial"
    job = runtime.catalog.get_job(report.job_id)
    assert job["status"] == "partial" and job["report"]["failed"] == 5
    passages = runtime.retriever.retrieve(STAFF, "annual leave days").passages
    assert passages[0].document_id == "good" and {p.document_id for p in passages} == {"good", "no-headings"}


def test_rerun_is_idempotent(make_runtime, tmp_path):
    runtime = make_runtime()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "leave.md").write_text(GOOD)
    acl = AclSpec.from_groups(["staff"])
    first = runtime.ingestor().ingest("t", discover([docs]), acl)
    segment = runtime.catalog.published_segment("t")
    second = runtime.ingestor().ingest("t", discover([docs]), acl)
    assert first.files[0].status == "published" and second.files[0].status == "unchanged"
    assert runtime.catalog.published_segment("t") == segment
    ids = runtime.partitions.get("t").table.column("chunk_id").to_pylist()
    assert len(ids) == len(set(ids)) == len(runtime.catalog.manifest("t", "leave", 1))


def test_crash_before_pointer_switch_leaves_old_version_served(make_runtime, tmp_path):
    runtime = make_runtime()
    docs = tmp_path / "docs"
    docs.mkdir()
    policy = docs / "leave.md"
    policy.write_text(GOOD)
    acl = AclSpec.from_groups(["staff"])
    runtime.ingestor().ingest("t", discover([docs]), acl)
    segment = runtime.catalog.published_segment("t")

    policy.write_text(GOOD.replace("25 days", "30 days"))
    real_publish = runtime.catalog.publish

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed mid-publish")

    runtime.catalog.publish = crash
    with pytest.raises(KeyboardInterrupt):
        runtime.ingestor().ingest("t", discover([docs]), acl)
    runtime.catalog.publish = real_publish
    assert runtime.catalog.published_segment("t") == segment
    passages = runtime.retriever.retrieve(STAFF, "annual leave days").passages
    assert passages and all("25 days" in p.text and p.version == 1 for p in passages)
    leftovers = [p.name for p in (runtime.config.partitions_dir / "t").iterdir() if p.name.startswith(".tmp")]
    assert leftovers == []
    # the retry after the crash publishes the new version
    runtime.ingestor().ingest("t", discover([docs]), acl)
    assert all("30 days" in p.text for p in runtime.retriever.retrieve(STAFF, "annual leave days").passages)


def test_dead_letters_replayed_after_the_file_is_fixed(make_runtime, tmp_path):
    runtime = make_runtime()
    docs = tmp_path / "docs"
    docs.mkdir()
    broken = docs / "broken.md"
    broken.write_text("---\ntitle: nothing but front matter\n---\n")
    runtime.ingestor().ingest("t", discover([docs]), AclSpec.from_groups(["staff"]))
    assert len(runtime.catalog.dead_letters("t")) == 1
    broken.write_text(GOOD)
    report = runtime.ingestor().retry_dead_letters("t")
    assert report.files[0].status == "published"
    assert runtime.catalog.dead_letters("t") == []
    assert runtime.retriever.retrieve(STAFF, "annual leave").passages[0].document_id == "broken"


def test_embed_failure_dead_letters_only_that_document(make_runtime, tmp_path):
    runtime = make_runtime()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "leave.md").write_text(GOOD)
    (docs / "poison.md").write_text("# Poison\n\n## Section\n\nPOISON text.\n")
    embedder = runtime.embedder
    real = embedder.embed_passages

    def failing(texts):
        if any("POISON" in t for t in texts):
            raise RuntimeError("model crashed")
        return real(texts)

    embedder.embed_passages = failing
    report = runtime.ingestor().ingest("t", discover([docs]), AclSpec.from_groups(["staff"]))
    statuses = {f.document_id: (f.status, f.code) for f in report.files}
    assert statuses == {"leave": ("published", None), "poison": ("failed", "embed_error")}


def test_front_matter_metadata_and_acl_file_when_the_operator_trusts_front_matter(make_runtime, tmp_path):
    runtime = make_runtime()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "exec.md").write_text("---\nid: exec-allowance\ntitle: Executive Allowance\nowner: board\n"
                                  "version: 3\neffective_date: 2026-01-01\n---\n\n## Allowance\n\n12,000 USD a year.\n")
    (docs / "draft.md").write_text("---\ntitle: Draft\nstatus: draft\n---\n\n# Draft\n\nNot approved.\n")
    acl_file = tmp_path / "acl.yaml"
    acl_file.write_text("default: [staff]\ndocuments:\n  exec-allowance: [exec]\n")
    report = runtime.ingestor().ingest("t", discover([docs], trust_front_matter=True), AclSpec.from_file(acl_file))
    statuses = {f.document_id: f.status for f in report.files}
    assert statuses == {"exec-allowance": "published", "draft": "skipped"}
    record = runtime.catalog.get_document("t", "exec-allowance")
    assert (record.title, record.owner, record.published_version, record.groups) == (
        "Executive Allowance", "board", 3, ("exec",))
    assert runtime.retriever.retrieve(STAFF, "allowance").passages == []
