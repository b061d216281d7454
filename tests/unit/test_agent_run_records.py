"""The typed run records (citadel/agent/records.py) keep the JSON form runs were stored in: each
record converts to the same keys, in the same order, that a stored run and its replays read."""

from __future__ import annotations

import json

from citadel.agent.records import (AnswerRecord, PlanRecord, RecordKey, StepOutcome, StepResult, StopReason,
                                   record_outcome, run_outcome)


def test_a_step_result_keeps_its_stored_form_for_each_outcome():
    ok = StepResult(StepOutcome.OK, passages=[{"chunk_id": "c1"}], degraded=[], result={"deal_id": 7}, audit=False,
                    repeated=False)
    assert json.dumps(ok.to_record()) == json.dumps({"status": "ok", "passages": [{"chunk_id": "c1"}], "degraded": [],
                                                      "result": {"deal_id": 7}, "audit": False, "repeated": False})
    rejected = StepResult.failed("review_rejected", review_id="r1", comment=None)
    assert list(rejected.to_record().items()) == [("status", "failed"), ("error", "review_rejected"), ("passages", []),
                                                   ("review_id", "r1"), ("comment", None)]
    review = StepResult(StepOutcome.NEEDS_REVIEW, reason="action_out_of_scope", tool="discount", arguments={"pct": 20},
                        detail="over the limit", round=1)
    assert list(review.to_record()) == ["status", "passages", "reason", "tool", "arguments", "detail", "round"]
    assert review.status.parks and not StepOutcome.FAILED.parks and isinstance(review.to_record()["status"], str)


def test_an_answer_record_carries_its_outcome_and_a_prompt_only_when_synthesised():
    answered = AnswerRecord("The limit is $75 [1].", False, None, [{"document_id": "travel"}], tokens=12)
    assert list(answered.to_record()) == ["answer", "outcome", "refused", "reason", "citations", "conflicts",
                                          "degraded", "missing", "tokens"]
    assert record_outcome(answered.to_record()) == "answered"
    cancelled = AnswerRecord.cancelled(["the kayak allowance"]).to_record()
    assert cancelled["reason"] == "cancelled" and cancelled["refused"]
    assert cancelled["missing"] == ["the kayak allowance"]
    answered.prompt = None
    assert answered.to_record()["prompt"] is None  # kept as null: a synthesised answer whose trace held no prompt


def test_records_stored_before_they_were_typed_still_read():
    stored = {RecordKey.step("s1"): {"status": "ok", "passages": []}, RecordKey.ANSWER: {
        "answer": "", "refused": True, "reason": "cancelled", "citations": [], "conflicts": [], "degraded": [],
        "missing": [], "tokens": 0}}
    assert run_outcome(stored) == record_outcome(stored["answer"]) and run_outcome({}) is None
    stored_stop = json.loads(json.dumps({"reason": StopReason.NO_NEW_EVIDENCE}))["reason"]
    assert stored_stop == "no_new_evidence" and StopReason(stored_stop) is StopReason.NO_NEW_EVIDENCE
    assert PlanRecord(invalid="no steps", code="plan_invalid", tokens=3).to_record() == {
        "invalid": "no steps", "code": "plan_invalid", "tokens": 3}
