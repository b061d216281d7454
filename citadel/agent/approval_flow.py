"""A run's approvals and reviews (DESIGN.md §10): what a person must decide before a step runs or an
answer leaves, asked once, told to the client, and read back when the run is restarted.

A T2 call waits for its approver group (`approval_required`); a step's failed check (an action out
of scope, an invalid tool response) and an answer's (conflicting versions with no reliable date, a
missing reference) become review tasks (`review_pending`, citadel/reviews/tasks.py). Either way the
step stays unrecorded and the run parks until the decision restarts it; the tasks live in the
approval store, which is also what the restarted run reads. Without a store nothing waits: a T2 call
fails its step and answers go out unchecked by a person.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from citadel.agent.evidence import EvidenceSet, gathered
from citadel.agent.journal import RunJournal, RunState
from citadel.agent.plan import Step
from citadel.agent.records import UNSET, ApprovalRecord, RecordKey, StepOutcome, StepResult
from citadel.reviews.checks import answer_check, single_shot_verdict
from citadel.reviews.evidence import evidence_lines
from citadel.reviews.tasks import (GO, MAX_REVIEW_ROUNDS, FailedCheck, ReviewPolicy, ReviewReason, Verdict, held_body,
                                   latest_review, request_review, settle)
from citadel.state.runs import EventType
from citadel.tools.approvals import Approval, ApprovalStatus, ApprovalStore
from citadel.tools.honeypots import HoneypotPlanter
from citadel.tools.registry import NeedsApproval, Refused, ToolRegistry
from citadel.tools.spec import RiskTier
from citadel.types import Passage

# The policy engine's refusals a person can settle, and the review each becomes.
REVIEWABLE = {"outside_limits": ReviewReason.ACTION_OUT_OF_SCOPE,
              "invalid_tool_response": ReviewReason.INVALID_TOOL_RESPONSE}
# A held answer's review tasks are keyed by this base (a step's by its step id).
ANSWER_REVIEW = "answer"
# A T2 call's step fails with this error where no approval store could hold its request.
NO_APPROVALS = "approval_required"


@dataclass(frozen=True)
class Clearance:
    """What a step may run with once its review and its approval are read: the step (with a
    reviewer's correction of its arguments), the arguments a person approved, or `held`: the step's
    result without running (it waits, or a person refused it)."""

    step: Step
    approved: dict[str, Any] | None = None
    held: StepResult | None = None


class ApprovalFlow:
    """`approvals`: where requests and review tasks wait (None: nothing waits); `reviews`: who
    reviews a failed check and for how long its task waits; `wall_clock`: the time approvals escalate
    and expire by (shared across processes); `honeypots`: plants a deliberately wrong approval request
    now and then, to measure reviews; `catalog` and `today`: what a single-shot answer's check reads."""

    def __init__(self, approvals: ApprovalStore | None, tools: ToolRegistry, journal: RunJournal, catalog,
                 *, reviews: ReviewPolicy, wall_clock: Callable[[], float], today: Callable[[], str],
                 honeypots: HoneypotPlanter | None = None):
        self.approvals = approvals
        self.tools = tools
        self.journal = journal
        self.catalog = catalog
        self.reviews = reviews
        self.wall_clock = wall_clock
        self.today = today
        self.honeypots = honeypots

    # ------------------------------------------------------------------ before a step runs
    def latest_review(self, state: RunState, base: str) -> tuple[int, Approval | None]:
        """The rounds of review this request had, and its latest task (0 and None without a store)."""
        return latest_review(self.approvals, state.run_id, base) if self.approvals else (0, None)

    def clear(self, state: RunState, step: Step, review: Approval | None) -> Clearance:
        """The step's review (`review`, its latest task) and its approval as they stand now."""
        if review is not None and review.status is ApprovalStatus.PENDING:
            return Clearance(step, held=StepResult(StepOutcome.NEEDS_REVIEW, review_id=review.approval_id))
        if review is not None and review.status is not ApprovalStatus.APPROVED:
            return Clearance(step, held=StepResult.failed(f"review_{review.status}", review_id=review.approval_id,
                                                          comment=review.comment))
        corrected = None
        if review is not None and review.reason == ReviewReason.ACTION_OUT_OF_SCOPE and review.final_args:
            # The reviewer's correction: checked against their limit when decided (an approver's edit)
            corrected = review.final_args
            step = step.model_copy(update={"args": corrected})
        approval = self._approval_for(state, step)
        if approval is not None and approval.status == ApprovalStatus.PENDING:
            return Clearance(step, held=StepResult(StepOutcome.NEEDS_APPROVAL, approval_id=approval.approval_id))
        if approval is not None and approval.status != ApprovalStatus.APPROVED:
            return Clearance(step, held=StepResult.failed(f"approval_{approval.status}",
                                                          approval_id=approval.approval_id))
        approved = approval.final_args if approval is not None else self._approved_correction(step, corrected)
        return Clearance(step, approved)

    def _approval_for(self, state: RunState, step: Step) -> Approval | None:
        """The approval this step asked for before (a resumed or restarted run), as it stands now."""
        record = state.records.get(RecordKey.approval(step.id))
        if record is None or self.approvals is None:
            return None
        return self.approvals.get(record["approval_id"])

    def _approved_correction(self, step: Step, corrected: dict[str, Any] | None) -> dict[str, Any] | None:
        """A T2 action the tool's approver group corrected is approved by that correction (the group
        that would approve it made it, within its limit): it runs after every check again, now."""
        spec = self.tools.spec(step.tool)
        if corrected is None or spec is None or spec.risk_tier is not RiskTier.T2:
            return None
        return corrected if self.reviews.tool_reviewers(spec) == spec.approver_group else None

    def on_approval_required(self, needed: NeedsApproval) -> StepResult:
        """A T2 call asked for a person's approval: the step waits for it (fails without a store)."""
        if self.approvals is None:
            return StepResult.failed(NO_APPROVALS)
        return StepResult(StepOutcome.NEEDS_APPROVAL, tool=needed.spec.name, arguments=dict(needed.arguments))

    def on_refused(self, step: Step, refused: Refused, rounds: int) -> StepResult:
        """The policy engine refused the call: a person settles it where they can (the reviewer
        corrects the arguments or the system, asks or rejects), else the step fails."""
        reason = REVIEWABLE.get(refused.reason)
        if reason is not None and self.approvals is not None and rounds < MAX_REVIEW_ROUNDS:
            return StepResult(StepOutcome.NEEDS_REVIEW, reason=str(reason), tool=step.tool, arguments=dict(step.args),
                              detail=refused.detail, round=rounds + 1)
        return StepResult.failed(refused.reason)

    # ------------------------------------------------------------------ parking
    def park(self, state: RunState, step: Step, result: StepResult) -> None:
        """The step waits for a person: ask (once) and tell the client; the step stays unrecorded."""
        if result.status is StepOutcome.NEEDS_APPROVAL:
            self._await_approval(state, step, result)
        else:
            self._await_review(state, step, result)

    def _await_approval(self, state: RunState, step: Step, result: StepResult) -> None:
        """Ask for the approval (once per step: the store and the record both keep the first), tell the
        client with an `approval_required` event, and leave the step unrecorded until it is decided."""
        if result.approval_id is UNSET:
            approval = self._request_approval(state, step, result.tool, result.arguments)
            approval_id = self.journal.record(state, RecordKey.approval(step.id),
                                              ApprovalRecord(approval.approval_id))["approval_id"]
        else:
            approval_id = result.approval_id
            approval = self.approvals.get(approval_id)
        self.journal.emit(state, EventType.APPROVAL_REQUIRED, f"approval:{approval_id}", {
            "approval_id": approval_id, "step_id": step.id, "tool": approval.tool, "arguments": approval.proposed_args,
            "approver_group": approval.approver_group, "expire_at": approval.expire_at})

    def _request_approval(self, state: RunState, step: Step, tool: str, arguments: dict[str, Any]) -> Approval:
        spec = self.tools.spec(tool)
        now = self.wall_clock()
        approval = self.approvals.request(Approval(
            "", state.principal.tenant_id, state.run_id, step.id, spec.name, state.principal.user_id,
            arguments, spec.approver_group, spec.lead_group,
            now + spec.escalate_after_s if spec.escalate_after_s else None,
            now + spec.expire_after_s if spec.expire_after_s else None,
            context=self._review_context(state, step, arguments)))
        if self.honeypots is not None:  # now and then a deliberately wrong request beside it, to measure reviews
            planted = self.honeypots.maybe_plant(approval, spec)
            if planted is not None:
                self.approvals.request(planted)
        return approval

    def _await_review(self, state: RunState, step: Step, result: StepResult) -> None:
        """A step's failed check goes to a person (citadel/reviews/tasks.py): the task (once per round),
        and a `review_pending` event; the step stays unrecorded until the task is decided."""
        task = self.approvals.get(result.review_id) if result.review_id is not UNSET else None
        if task is None:
            failed = FailedCheck(ReviewReason(result.reason), self.reviews.tool_reviewers(self.tools.spec(step.tool)),
                                 result.detail, step.tool, result.arguments,
                                 self._evidence_lines(state, step, result.arguments))
            task = request_review(self.approvals, failed, tenant_id=state.principal.tenant_id, run_id=state.run_id,
                                  base=step.id, round_=result.round, requester=state.principal.user_id,
                                  now=self.wall_clock(), expire_after_s=self.reviews.expire_after_s)
        self.review_pending(state, task, step_id=step.id)

    def review_pending(self, state: RunState, task: Approval, **where: str) -> None:
        """Tell the client a review task holds the run (once per task); the run then parks."""
        self.journal.emit(state, EventType.REVIEW_PENDING, f"review:{task.approval_id}",
                          {**where, **held_body(task, task.context.get("message", ""))})

    def _review_context(self, state: RunState, step: Step, arguments: dict[str, Any]) -> dict[str, Any]:
        """What the reviewer reads beside the proposal: the record it would change, as the requester
        may read it now, and two lines of the run's evidence with their citations."""
        return {"current": self.tools.current_record(step.tool, state.principal, arguments),
                "evidence": self._evidence_lines(state, step, arguments)}

    @staticmethod
    def _evidence_lines(state: RunState, step: Step, arguments: dict[str, Any]) -> list[dict[str, str]]:
        about = " ".join([state.run.question, step.ask, *(str(v) for v in arguments.values())])
        return evidence_lines(gathered(state.step_records()), about)

    # ------------------------------------------------------------------ answers
    def single_shot_verdict(self, state: RunState, response) -> Verdict:
        """Whether the single-shot answer (the answer service's response) goes out, waits or was closed."""
        if self.approvals is None:
            return Verdict(GO)
        return single_shot_verdict(self.approvals, self.reviews, self.catalog, state.principal, state.run.question,
                                   response, self.today(), self.wall_clock, run_id=state.run_id)

    def answer_verdict(self, state: RunState, evidence: EvidenceSet, passages: list[Passage],
                       conflicts: list[dict[str, Any]], record, invalid_markers: int) -> Verdict:
        """Whether the synthesised answer (an AnswerRecord) goes out, waits for a review, or was
        closed by one (citadel/reviews/tasks.py)."""
        if self.approvals is None or record.refused:
            return Verdict(GO)
        cited = [c["document_id"] for c in record.citations]
        failed = answer_check(state.run.question, passages, cited, evidence.records, invalid_markers, self.reviews,
                              evidence.today, conflicts)
        return settle(self.approvals, failed, tenant_id=state.principal.tenant_id, run_id=state.run_id,
                      base=ANSWER_REVIEW, requester=state.principal.user_id, now=self.wall_clock(),
                      expire_after_s=self.reviews.expire_after_s)

    def sources_corrected(self, state: RunState) -> int | None:
        """The round of the held answer's review whose reviewer corrected its sources; None before any."""
        round_, latest = self.latest_review(state, ANSWER_REVIEW)
        return round_ if latest is not None and latest.status is ApprovalStatus.APPROVED else None
