"""One prompt path (DESIGN.md §10): a single-shot answer is sent the same budgeted
prompt as a run's synthesis — the system text first and byte-identical whatever the question, the
sources tagged with status and effective date, the task (question and `answer.task_instruction`)
last — and only the sources that fit their allowance can be cited."""

from __future__ import annotations

import pytest

from citadel.answer.extractive import ExtractiveGenerator
from citadel.config import AgentConfig
from citadel.generation.base import Generator
from citadel.ingest.sources import AclSpec, discover
from citadel.prompting.prompt import (AGENT_SYSTEM_PROMPT, SOURCES_HEADER, SYSTEM_PROMPT, TASK_INSTRUCTION,
                                      PromptAssembler, source_records, tagged_source)
from citadel.types import Principal

STAFF = Principal("t", "u1", frozenset({"staff"}))
# The hash embedder's cosines are bag-of-words overlaps: its vector floor is lowered (as in test_answer).
HASH_GATE = {"min_vector_score": 0.0, "strong_vector_score": 0.9}
THOROUGH = "Be thorough and complete: cover every detail the sources give, citing sources with [n] markers."

TRAVEL = """---
title: Travel policy
effective_date: 2024-01-01
---
# Travel policy

## Approval

Every trip needs approval from your manager before booking. Contractors need approval from the
contracting officer instead of a manager.

## Per diem

The per diem for meals is $75 per day in domestic cities. Receipts are required for lodging.
"""
LAPTOPS = """---
title: Laptop policy
effective_date: 2025-03-01
---
# Laptop policy

## Lost equipment

Report a lost or stolen laptop to the security desk within 24 hours.

## Requesting a laptop

New staff request a laptop by filing a ticket with IT support.
"""


class Recording(Generator):
    """The extractive generator's quotes (or `reply(sources)`), remembering every prompt and the
    sources it was handed."""

    model_id = "recording"

    def __init__(self, reply=None):
        self.calls: list[tuple] = []
        self.reply = reply

    def generate(self, question, sources, prompt=None):
        self.calls.append((prompt, list(sources)))
        return self.reply(sources) if self.reply else ExtractiveGenerator().generate(question, sources, prompt)


@pytest.fixture
def service_for(make_runtime, tmp_path):
    def build(**answer):
        runtime = make_runtime(answer={**HASH_GATE, **answer})
        corpus = tmp_path / "corpus"
        corpus.mkdir(exist_ok=True)
        (corpus / "travel.md").write_text(TRAVEL)
        (corpus / "laptops.md").write_text(LAPTOPS)
        runtime.ingestor().ingest("t", discover([corpus], trust_front_matter=True), AclSpec.from_groups(["staff"]))
        service = runtime.answer_service
        service.generator = Recording()
        return service

    return build


def test_single_shot_prompts_share_one_stable_prefix_and_end_with_the_task(service_for):
    service = service_for()
    questions = ("Who approves travel for contractors?", "How do I report a lost laptop?")
    responses = [service.ask(STAFF, q) for q in questions]
    assert not any(r.refused for r in responses), [r.reason for r in responses]
    (first, first_sources), (second, second_sources) = service.generator.calls
    assert first is not None and second is not None, "every single-shot generation is sent an assembled prompt"
    assert first_sources[0].passage.document_id != second_sources[0].passage.document_id, "different sources"
    (system_1, user_1), (system_2, user_2) = ([m["content"] for m in p.messages()] for p in (first, second))
    assert system_1 == system_2 == SYSTEM_PROMPT, "the cached prefix is the same bytes on every call"
    for question, user in zip(questions, (user_1, user_2)):
        assert user.startswith(f"{SOURCES_HEADER}\n<<<SOURCE 1>>>")
        assert user.endswith(f"<<<END SOURCE {user.count('<<<END SOURCE')}>>>\n\nQuestion: {question}\n\n"
                             f"{TASK_INSTRUCTION}"), "the sources, then the task last"
    assert "Status: published; effective date: 2024-01-01" in user_1
    assert "Status: published; effective date: 2025-03-01" in user_2
    report = responses[0].trace.prompt
    assert report["tokens"] <= report["max_tokens"] == AgentConfig().prompt_max_tokens and not report["cut"]
    assert report["parts"]["sources"]["kept"] == [f"source {s.number}" for s in first_sources]


def test_the_configured_task_instruction_ends_single_shot_and_run_prompts(service_for, make_runtime):
    service = service_for(task_instruction=THOROUGH)
    response = service.ask(STAFF, "Who approves travel for contractors?")
    service.compose_from(STAFF, "Who approves travel for contractors?", response.passages, task="Name the approver.")
    (single, _), (run, _) = service.generator.calls
    assert single.messages()[0]["content"] == SYSTEM_PROMPT and run.messages()[0]["content"] == AGENT_SYSTEM_PROMPT
    for prompt in (single, run):
        assert prompt.messages()[1]["content"].endswith(f"\n\n{THOROUGH}")
        assert TASK_INSTRUCTION not in prompt.messages()[1]["content"]
    # the local LLM's answers are assembled by the same wiring (its model is not loaded to check this)
    local = make_runtime(answer={"generator": "local_llm", "task_instruction": THOROUGH}).answer_service
    assert local.assembler.instruction == THOROUGH


def test_sources_over_their_allowance_are_cut_whole_and_never_cited(service_for):
    service = service_for()
    question = "Who approves travel for contractors and what is the per diem for meals?"
    service.ask(STAFF, question)
    [(_, everything)] = service.generator.calls
    assert len(everything) >= 2, "the question draws more than one source"
    first, dropped = everything[0], everything[1]
    records = source_records(service.catalog, "t", everything)
    count = service.assembler.count
    room = count(SOURCES_HEADER) + count(tagged_source(first, records[first.passage.document_id])) + 2
    service.assembler = PromptAssembler(count, {**AgentConfig().prompt_allowances, "sources": room}, 32_000)
    # a model that cites a source it was never shown, in the words of that source
    service.generator = Recording(lambda sources: f"{sources[0].text.split('. ')[0]}. [1] {dropped.text} [2]")
    response = service.ask(STAFF, question)
    [(prompt, handed)] = service.generator.calls
    assert [s.number for s in handed] == [s.number for s in prompt.sources] == [1], "only the kept source"
    assert "<<<SOURCE 2>>>" not in prompt.messages()[1]["content"]
    assert {(c["part"], c["label"]) for c in response.trace.prompt["cut"]} >= {("sources", "source 2")}
    assert response.citations and {c["chunk_id"] for c in response.citations} == {first.passage.chunk_id}
    assert "[2]" not in response.answer and dropped.passage.chunk_id not in {p.chunk_id for p in response.trace.drafted}
