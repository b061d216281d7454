"""The IngestEngine suite (citadel/ingest/engine.py): what the CLI relies on from either engine (the
local one, Ray Data).

One job of two tenants, run once per engine: `alpha` with an exec-only document, `beta` with a file
that holds nothing but front matter. Every source is accounted for in the reports; each tenant is
published under its ACL (the exec-only document readable by exec alone); the bad file is reported and
dead-lettered while the rest of its tenant is published; the published segments are the local
engine's, row for row; running the same job again publishes nothing new; an empty job returns no
reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from citadel.ingest.engine import IngestEngine, TenantSources
from citadel.ingest.report import JobReport
from citadel.ingest.sources import AclSpec, discover
from citadel.segments.layout import CHUNKS
from citadel.types import Principal

DOCUMENTS = {
    "alpha": {"leave": "# Leave policy\n\n## Annual leave\n\nStaff receive 25 days of annual leave each year.\n",
              "hotels": "# Hotel policy\n\n## Limits\n\nThe hotel limit is 220 USD per night in London.\n",
              "allowance": "# Executive allowance\n\n## Amount\n\nExecutives receive 900 USD a month.\n"},
    "beta": {"laptops": "# Laptop policy\n\n## Encryption\n\nLaptops must use full-disk encryption.\n",
             "empty": "---\ntitle: nothing but front matter\n---\n"},
}
ACLS = {"alpha": AclSpec(default=("staff",), documents={"allowance": ("exec",)}),
        "beta": AclSpec.from_groups(["staff"])}
PUBLISHED = {"alpha": {"leave", "hotels", "allowance"}, "beta": {"laptops"}}
BAD = ("beta", "empty", "no_content")


def make_job(root: Path) -> list[TenantSources]:
    jobs = []
    for tenant, documents in DOCUMENTS.items():
        directory = root / tenant
        directory.mkdir(parents=True, exist_ok=True)
        for document_id, text in documents.items():
            (directory / f"{document_id}.md").write_text(text)
        jobs.append(TenantSources(tenant, tuple(discover([directory])), ACLS[tenant]))
    return jobs


def make_wiring(home: Path):
    from citadel.config import load_config
    from citadel.wiring import Wiring

    return Wiring(config=load_config(environ={"CITADEL_ANSWER__CONFIRM": "false", "CITADEL_HOME": str(home),
                                              "CITADEL_EMBEDDING__BACKEND": "hash"}))


def published_rows(wiring, tenant: str) -> list[tuple]:
    segment = wiring.catalog.published_segment(tenant)
    table = pq.read_table(wiring.config.partitions_dir / tenant / segment / CHUNKS)
    return sorted(zip(*(table.column(name).to_pylist() for name in ("chunk_id", "document_id", "text"))))


@dataclass
class Outcome:
    jobs: list[TenantSources]
    first: list[JobReport]
    again: list[JobReport]


class IngestEngineConformance:
    """Override `backend` (class-scoped) with the engine under test, writing through `wiring` (a fresh
    home of the class's own)."""

    @pytest.fixture(scope="class")
    @classmethod
    def wiring(cls, tmp_path_factory):
        wiring = make_wiring(tmp_path_factory.mktemp("ingest-engine") / "home")
        yield wiring
        wiring.catalog.close()

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, wiring) -> IngestEngine:
        raise NotImplementedError("a conformance subclass provides the engine under test")

    @pytest.fixture(scope="class")
    @classmethod
    def outcome(cls, backend, tmp_path_factory) -> Outcome:
        jobs = make_job(tmp_path_factory.mktemp("ingest-sources"))
        first = backend.run(jobs)
        return Outcome(jobs, first, backend.run(jobs))

    @pytest.fixture(scope="class")
    @classmethod
    def reference(cls, outcome, tmp_path_factory):
        """The same job through the local engine, in a home of its own."""
        wiring = make_wiring(tmp_path_factory.mktemp("ingest-reference") / "home")
        wiring.ingestor().run(outcome.jobs)
        yield wiring
        wiring.catalog.close()

    def test_implements_protocol(self, backend):
        assert isinstance(backend, IngestEngine) and isinstance(backend.name, str) and backend.name

    def test_an_empty_job_returns_no_reports(self, backend):
        assert backend.run([]) == []

    def test_every_source_is_accounted_for_in_the_reports(self, outcome):
        assert outcome.first and all(isinstance(report, JobReport) for report in outcome.first)
        statuses = sorted((f.document_id, f.status) for report in outcome.first for f in report.files)
        expected = sorted([(d, "published") for documents in PUBLISHED.values() for d in documents]
                          + [(BAD[1], "failed")])
        assert statuses == expected

    def test_each_tenant_is_published_under_its_acl(self, outcome, wiring):
        def readable(tenant: str, group: str) -> set[str]:
            return set(wiring.catalog.readable_documents(Principal(tenant, "u", frozenset({group}))))

        assert readable("alpha", "staff") == PUBLISHED["alpha"] - {"allowance"}
        assert readable("alpha", "exec") == {"allowance"}
        assert readable("beta", "staff") == PUBLISHED["beta"]

    def test_a_bad_source_is_dead_lettered_and_the_rest_published(self, outcome, wiring):
        tenant, document_id, code = BAD
        letters = [(Path(letter["source"]).stem, letter["code"]) for letter in wiring.catalog.dead_letters(tenant)]
        assert set(letters) == {(document_id, code)}  # once per run of the job
        assert {d.document_id for d in wiring.catalog.list_documents(tenant) if d.published_version} == PUBLISHED[tenant]

    def test_the_published_segments_are_the_local_engines_row_for_row(self, outcome, wiring, reference):
        for tenant in DOCUMENTS:
            assert published_rows(wiring, tenant) == published_rows(reference, tenant)

    def test_running_the_same_job_again_publishes_nothing_new(self, outcome):
        statuses = {f.status for report in outcome.again for f in report.files if f.document_id != BAD[1]}
        assert statuses == {"unchanged"}
