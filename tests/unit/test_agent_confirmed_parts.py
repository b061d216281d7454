"""A run ends as a single-shot answer does (DESIGN.md §4 step 6, §10): with a reader, a checklist part
is asserted only when its asked fact is confirmed; a part that is not is named with its closest
evidence, cited; the outcome is answered / not_confirmed / refused. And a run's searches rerank with
the reader, failing open. The fake reader (word overlap) and the hash embedder keep it fast."""

from __future__ import annotations

import re

import pytest

from citadel.agent.executor import MAX_RERANK_CANDIDATES, SearchTool
from citadel.agent.orchestrator import run_outcome
from citadel.agent.parts import OFFER, PartCheck, citation_number, in_context, part_passages, unconfirmed_note
from citadel.ingest.sources import AclSpec, discover
from citadel.prompting.source import Source
from citadel.reader.fake import FakeReader
from citadel.rerank.backends import NoRerank
from citadel.rerank.reader import ReaderReranker
from citadel.retrieval.retriever import RetrievalResult
from citadel.state.runs import EventType, MemoryRunStore
from citadel.types import Passage
from tests.unit.test_agent_orchestrator import (HASH_GATE, KAYAK_PART, STAFF, TWO_PARTS, WITH_A_GAP, Harness,
                                                ManualClock, assert_clean_log, streamed_answer, write_corpus)

READER = {**HASH_GATE, "reader": "fake", "confirm": True, "reranker": "reader"}
BOTH_UNCONFIRMED = "What is the lodging allowance in Denver and how much does a replacement laptop cost?"
NOTHING_ON_TOPIC = "What is the kayak rental allowance and where do I store the canoe paddles?"


@pytest.fixture
def reading_agent(make_runtime, tmp_path):
    def build(**answer) -> Harness:
        runtime = make_runtime(answer={**READER, **answer})
        corpus = discover([write_corpus(tmp_path)], trust_front_matter=True)
        runtime.ingestor().ingest("t", corpus, AclSpec.from_groups(["staff"]))
        clock = ManualClock()
        return Harness(runtime, MemoryRunStore(clock.now), clock)

    return build


def markers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\[(\d+)\]", text)]


def test_the_confirmed_part_is_asserted_and_the_other_named_with_its_closest_evidence_cited(reading_agent):
    harness = reading_agent()
    harness.orchestrator().drive(harness.start(WITH_A_GAP), "a")
    final = harness.final()
    assert final["outcome"] == "answered" == run_outcome(harness.store.steps("run-1")) and not final["refused"]
    asserted, note = final["answer"].split("The documents I can see don't confirm", 1)
    # The confirmed part, quoted with its section cited; nothing about the other part asserted.
    assert "contracting officer" in asserted and "kayak" not in asserted.lower()
    [first] = set(markers(asserted))
    assert final["citations"][first - 1]["heading"] == "Travel policy > Approval"
    # The other part named, with its closest sentence quoted and cited as a real citation of the answer.
    assert note.startswith(f" {KAYAK_PART}. The closest is: \"") and final["missing"] == [KAYAK_PART]
    [closest] = markers(note)
    assert 1 <= closest <= len(final["citations"]) and closest != first
    quoted = re.search(r'"(.+)"', note).group(1)
    cited = final["citations"][closest - 1]
    assert cited["heading"] == "Travel policy > Per diem" and "$75" in quoted
    # Streamed and cited as delivered: the events carry the renumbered citations.
    assert streamed_answer(harness) == final["answer"]
    events = [e.data for e in harness.events() if e.type == EventType.CITATION]
    assert [e["number"] for e in events] == list(range(1, len(final["citations"]) + 1))
    assert_clean_log(harness)


def test_every_part_confirmed_answers_as_before(reading_agent):
    harness = reading_agent()
    harness.orchestrator().drive(harness.start(TWO_PARTS), "a")
    final = harness.final()
    assert final["outcome"] == "answered" and final["missing"] == []
    assert "contracting officer" in final["answer"] and "ticket" in final["answer"]
    assert "don't confirm" not in final["answer"]


def test_on_topic_evidence_with_no_part_confirmed_is_not_confirmed_and_asserts_nothing(reading_agent):
    harness = reading_agent()
    run = harness.orchestrator().drive(harness.start(BOTH_UNCONFIRMED), "a")
    final = harness.final()
    assert final["outcome"] == "not_confirmed" == run_outcome(harness.store.steps("run-1"))
    assert final["refused"] and final["reason"] == "not_confirmed" and run.status.value in ("succeeded", "stopped")
    assert len(final["missing"]) == 2 and final["answer"].endswith(OFFER)
    sentences = [s for s in final["answer"].split("The documents I can see don't confirm ") if s]
    assert len(sentences) == 2  # every sentence names a part; none states a fact of its own
    assert sorted(set(markers(final["answer"]))) == list(range(1, len(final["citations"]) + 1))
    assert {c["document_id"] for c in final["citations"]} == {"travel", "laptops"}
    assert_clean_log(harness)


def test_nothing_on_topic_is_refused(reading_agent):
    harness = reading_agent()
    harness.orchestrator().drive(harness.start(NOTHING_ON_TOPIC), "a")
    final = harness.final()
    assert final["outcome"] == "refused" and final["reason"] == "low_coverage" and final["citations"] == []
    assert len(final["missing"]) == 2


class FailingReader:
    model_id = "broken"

    def score(self, question, texts):
        raise RuntimeError("the reader is down")


def test_a_failing_reader_confirms_nothing_and_says_so(reading_agent):
    harness = reading_agent()
    harness.runtime.answer_service.reader = FailingReader()
    harness.orchestrator().drive(harness.start(TWO_PARTS), "a")
    final = harness.final()
    assert final["outcome"] == "not_confirmed" and final["refused"]  # the topic was found, no fact confirmed
    assert "reader_skipped" in final["degraded"] and len(final["missing"]) == 2
    assert final["answer"].count("The closest section is [") == 2 and final["citations"]


# ----------------------------------------------------------------------------- the note and its numbering
def passage(chunk: str, document: str = "travel", heading: str = "Travel policy > Per diem",
            text: str = "The per diem is $75.", score: float = 1.0) -> Passage:
    return Passage(chunk, text, document, "Travel policy", 1, heading, None, f"{document}.md", score, 0)


def test_the_closest_section_reuses_the_answers_number_or_is_cited_after_it():
    per_diem = Source(3, passage("t:travel:v1:0003"), "The per diem is $75.", 6)
    cited = [{"chunk_id": "t:travel:v1:0002", "document_id": "travel", "version": 1,
              "heading": "Travel policy > Per diem"}]
    assert citation_number(cited, per_diem.citation()) == 1 and len(cited) == 1  # same section, other chunk
    approval = Source(1, passage("t:travel:v1:0001", heading="Travel policy > Approval"), "Ask.", 1)
    checks = [PartCheck("Who approves trips", True), PartCheck("what is the kayak allowance", False, "Ask.", approval),
              PartCheck("where is the canoe", False)]
    note = unconfirmed_note(checks, cited)
    assert note == ("The documents I can see don't confirm what is the kayak allowance. The closest is: \"Ask.\" [2]. "
                    "The documents I can see don't confirm where is the canoe.")
    assert cited[1]["heading"] == "Travel policy > Approval"


def test_a_part_is_read_from_its_own_search_first_then_the_passages_holding_its_words():
    laptops = passage("t:laptops:v1:0001", "laptops", "Laptop policy > Requesting", "Request a laptop by ticket.")
    travel = passage("t:travel:v1:0001", text="Trips need a manager's approval.")
    other = passage("t:travel:v1:0002", text="Receipts are required for lodging.")
    chosen = part_passages("how do staff request a laptop", [travel, other, laptops], None, own=[["t:travel:v1:0002"]],
                           most=2)
    assert [p.chunk_id for p in chosen] == ["t:travel:v1:0002", "t:laptops:v1:0001"]


def test_a_part_is_read_with_the_situation_that_leads_up_to_it():
    question = ("I got a jury summons for next month. Do those days come out of my vacation balance? Also, I'm "
                "off on Friday. Who do I tell?")
    contexts = in_context(question, ["Do those days come out of my vacation balance", "Who do I tell", "boats"])
    assert contexts == {
        "Do those days come out of my vacation balance":
            "I got a jury summons for next month. Do those days come out of my vacation balance",
        "Who do I tell": "I'm off on Friday. Who do I tell", "boats": "boats"}


# ----------------------------------------------------------------------------- search reranks with the reader
class ListRetriever:
    """Returns the given passages (the fused order), recording the depth it was asked for."""

    def __init__(self, passages):
        self.passages, self.asked = passages, []

    def retrieve(self, principal, query, top_k=None, request_id=None):
        self.asked.append(top_k)
        return RetrievalResult(request_id or "r", "exact", self.passages[:top_k], degraded=[])


class BrokenReranker:
    enabled = True
    model_id = "broken"

    def rerank(self, query, passages, top_n):
        raise RuntimeError("down")


FUSED = [passage(f"t:travel:v1:000{i}", text=text, score=1.0 - i / 10) for i, text in enumerate([
    "Economy class is the default.", "Receipts are required for lodging.", "Report a lost laptop within a day.",
    "Contractors need approval from the contracting officer."])]


def test_search_reranks_its_candidates_with_the_reader_and_keeps_top_k():
    retriever = ListRetriever(FUSED)
    tool = SearchTool(retriever, top_k=2, reranker=ReaderReranker(FakeReader(), fusion_weight=0.0, candidates=30), candidates=30)
    result = tool.run(STAFF, tool.arguments("who approves contractors", {}), "run:s1")
    assert retriever.asked == [30]  # the reranker's depth, not top_k
    assert [p["chunk_id"] for p in result["passages"]][0] == "t:travel:v1:0003" and len(result["passages"]) == 2
    assert result["degraded"] == []
    assert SearchTool(retriever, candidates=10_000).candidates == MAX_RERANK_CANDIDATES


def test_search_fails_open_to_the_fused_order_and_says_so():
    retriever = ListRetriever(FUSED)
    tool = SearchTool(retriever, top_k=2, reranker=BrokenReranker())
    result = tool.run(STAFF, tool.arguments("who approves contractors", {}), "run:s1")
    assert [p["chunk_id"] for p in result["passages"]] == ["t:travel:v1:0000", "t:travel:v1:0001"]
    assert result["degraded"] == ["rerank_skipped"]


def test_search_without_a_reranker_or_with_none_asks_for_top_k_only():
    for reranker in (None, NoRerank()):
        retriever = ListRetriever(FUSED)
        tool = SearchTool(retriever, top_k=3, reranker=reranker)
        result = tool.run(STAFF, tool.arguments("q", {}), "run:s1")
        assert retriever.asked == [3] and [p["chunk_id"] for p in result["passages"]] == [p.chunk_id for p in FUSED[:3]]


def test_the_wiring_gives_search_the_reader_reranker_only_when_it_reranks(make_runtime):
    assert make_runtime(answer=READER).agent_tools._tools["search"].reranker is not None
    assert make_runtime(answer={**READER, "reranker": "none"}).agent_tools._tools["search"].reranker is None
