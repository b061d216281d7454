"""The PassageRetriever suite (citadel/retrieval/retriever.py): what the answer service, a run's
search tool and the HTTP edge rely on from whatever retrieves (the in-process Retriever, its guard,
the proxy to the retriever deployment).

Over a small home (hash embedder) of two tenants: `a` with an exec-only document, `b` with a planted
sentence. A result names its request (the caller's id, else a new one) and returns at most `top_k`
distinct passages best first, a shorter list the prefix of a longer one, the same for the same query;
only the caller's tenant and only documents its groups may read ever come back, before and after an
ACL change (effective on the next query); a caller who can read nothing, or a tenant with no
partition, gets an empty result, not an error; the passage that states the query comes first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from citadel.retrieval.retriever import PassageRetriever, RetrievalResult, SearchPlan
from citadel.types import Passage, Principal

PLANTED = "The quartz heron ledger authorises seventeen violet submarines every Thursday"
RESTRICTED = "The obsidian falcon allowance pays ninety amber lanterns each quarter"
TOPICS = ["travel", "expenses", "security", "hiring", "benefits", "laptops"]
QUERY = "approval for travel items"
STAFF_A = Principal("a", "alice", frozenset({"staff"}))
EXEC_A = Principal("a", "erin", frozenset({"exec"}))
STAFF_B = Principal("b", "bob", frozenset({"staff"}))
NOBODY_A = Principal("a", "nina", frozenset({"contractors"}))
NO_PARTITION = Principal("zz", "zed", frozenset({"staff"}))


def write_corpus(directory: Path, tenant: str, documents: int, extra: dict[str, str]) -> Path:
    """Small Markdown documents with headings, and `extra` documents (id → one sentence)."""
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(documents):
        topic = TOPICS[i % len(TOPICS)]
        body = "\n\n".join(f"## {topic.title()} rule {j}\n\nEmployees of {tenant} follow {topic} rule {j} of "
                           f"document {i}: approval is needed for {topic} items above {10 * (j + 1)} units."
                           for j in range(3))
        (directory / f"{topic}-{i}.md").write_text(f"# {topic.title()} policy {i}\n\n{body}\n")
    for document_id, sentence in extra.items():
        (directory / f"{document_id}.md").write_text(f"# {document_id.title()}\n\n## Rule\n\n{sentence}.\n")
    return directory


@dataclass
class RetrievalHome:
    wiring: object  # citadel.wiring.Wiring over the home


def build_home(root: Path) -> RetrievalHome:
    from citadel.config import load_config
    from citadel.ingest.sources import AclSpec, discover
    from citadel.wiring import Wiring

    config = load_config(environ={"CITADEL_ANSWER__CONFIRM": "false", "CITADEL_HOME": str(root / "home"),
                                  "CITADEL_EMBEDDING__BACKEND": "hash"})
    wiring = Wiring(config=config)
    ingestor = wiring.ingestor()
    corpus_a = write_corpus(root / "docs" / "a", "a", 6, {"restricted": RESTRICTED})
    ingestor.ingest("a", discover([corpus_a]), AclSpec(default=("staff", "exec"), documents={"restricted": ("exec",)}))
    corpus_b = write_corpus(root / "docs" / "b", "b", 4, {"planted": PLANTED})
    ingestor.ingest("b", discover([corpus_b]), AclSpec.from_groups(["staff"]))
    return RetrievalHome(wiring)


class RetrieverConformance:
    """Override `backend` (class-scoped) with the retriever under test over `home.wiring` (the
    class's own home: the ACL test changes it)."""

    @pytest.fixture(scope="class")
    @classmethod
    def home(cls, tmp_path_factory):
        home = build_home(tmp_path_factory.mktemp("retrieval"))
        yield home
        home.wiring.catalog.close()

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, home) -> PassageRetriever:
        raise NotImplementedError("a conformance subclass provides the retriever under test")

    def test_implements_protocol(self, backend):
        assert isinstance(backend, PassageRetriever)

    def test_a_result_names_its_request_and_holds_distinct_passages_best_first(self, backend):
        result = backend.retrieve(STAFF_A, QUERY, top_k=8, request_id="req-1")
        assert isinstance(result, RetrievalResult) and result.request_id == "req-1"
        assert result.plan in set(SearchPlan)
        assert result.passages and all(isinstance(p, Passage) for p in result.passages)
        ids = [p.chunk_id for p in result.passages]
        assert len(ids) == len(set(ids)) <= 8
        scores = [p.score for p in result.passages]
        assert all(x >= y for x, y in zip(scores, scores[1:])), scores

    def test_without_a_request_id_one_is_made(self, backend):
        first, second = (backend.retrieve(STAFF_A, QUERY) for _ in range(2))
        assert first.request_id and second.request_id and first.request_id != second.request_id

    def test_top_k_bounds_the_passages_and_a_shorter_list_is_a_prefix(self, backend):
        longer = [p.chunk_id for p in backend.retrieve(STAFF_A, QUERY, top_k=8).passages]
        for top_k in (1, 3):
            shorter = [p.chunk_id for p in backend.retrieve(STAFF_A, QUERY, top_k=top_k).passages]
            assert shorter == longer[:top_k]

    def test_deterministic(self, backend):
        def ranked():
            return [(p.chunk_id, p.score) for p in backend.retrieve(STAFF_A, QUERY, top_k=8).passages]

        assert ranked() == ranked()

    def test_the_passage_that_states_the_query_comes_first(self, backend):
        assert backend.retrieve(STAFF_B, PLANTED).passages[0].document_id == "planted"

    def test_another_tenants_passages_never_come_back(self, backend):
        for query in (PLANTED, "quartz heron ledger", "violet submarines Thursday"):
            passages = backend.retrieve(STAFF_A, query, top_k=50).passages
            assert passages, "tenant a still gets its own passages"
            assert all(p.chunk_id.startswith("a:") and p.document_id != "planted" for p in passages)

    def test_a_restricted_document_reaches_only_its_readers(self, backend):
        staff = backend.retrieve(STAFF_A, RESTRICTED, top_k=50).passages
        assert staff and "restricted" not in {p.document_id for p in staff}
        assert backend.retrieve(EXEC_A, RESTRICTED).passages[0].document_id == "restricted"

    def test_a_caller_who_reads_nothing_and_a_tenant_without_a_partition_get_nothing(self, backend):
        assert backend.retrieve(NOBODY_A, QUERY).passages == []
        assert backend.retrieve(NO_PARTITION, QUERY).passages == []

    def test_an_acl_change_is_effective_on_the_next_query(self, backend, home):
        catalog = home.wiring.catalog
        catalog.set_acl("a", "restricted", ["staff", "exec"], actor="conformance")
        try:
            assert backend.retrieve(STAFF_A, RESTRICTED).passages[0].document_id == "restricted"
        finally:
            catalog.set_acl("a", "restricted", ["exec"], actor="conformance")
        assert "restricted" not in {p.document_id for p in backend.retrieve(STAFF_A, RESTRICTED, top_k=50).passages}
