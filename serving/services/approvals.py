"""The approvals endpoint family (DESIGN.md §10): the pending approvals a
reviewer may decide, the decision, and how well reviews are going.

A reviewer is a verified user like any other; they see and decide only their tenant's approvals whose
deciding groups (the tool's approver group, plus its lead group once escalated) they belong to — an
approval of another tenant is 404, one of their tenant they may not decide is 403. An approval or an
edit goes back through the policy engine (`check_edit`: schema, the approver's limit, not the
requester themselves); a second decision is 409. The decision is recorded with who, when, and the
proposed and final arguments, the run gets an event, and the run is restarted: the orchestrator calls
the tool with the final arguments (every check again, now) or records the rejection.

Reviews that mean something (item 6):

- **Honeypots** (citadel/tools/honeypots.py): a deliberately wrong request stored next to a real one,
  flagged `honeypot` in the store and shown to reviewers like any other (`public` never shows the
  flag, and shows the synthetic run id without its prefix). Deciding one runs nothing and restarts no
  run (there is none). Approving it — approve or edit_and_approve — is recorded (APPROVED, on a record
  flagged honeypot) as a *miss* and the reviewer is told at once; it skips `check_edit`'s schema and
  limit (the request is wrong on purpose: the question is whether the reviewer notices), but keeps
  its one rule that is not about the arguments, so a honeypot answers like a real approval would:
  a requester cannot approve their own request. Rejecting it is a *catch*. Expiry is neither.
- **Metrics** (serving/services/metrics.py): honeypots caught, missed and expired per team (the
  approver group); real approvals approved, rejected and expired per tool, and the seconds from
  request to decision per tool. `review_stats` computes the same from the store: catch rate per team,
  approval rate and median decision time per tool.
- **Candidate test items** (citadel/quality/candidates.py): every edit (final arguments differ from
  the proposed) or rejection of a real tool call is queued in the catalog, per tenant and tool, as a
  candidate item — tool, proposed and final arguments, the reviewer's masked reason — that an owner
  may promote into the tool's labeled set. Once per approval; a failed queue write is logged and never
  undoes or fails the decision already recorded.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from citadel.errors import CitadelError, Forbidden, InvalidRequest, NotFound
from citadel.reviews.items import review_item
from citadel.reviews.tasks import ReviewReason, has_run
from citadel.state.runs import EventType, RunStore
from citadel.tools.approvals import MAX_LIST, Approval, ApprovalStatus, ApprovalStore, TaskKind
from citadel.tools.honeypots import shown_run_id
from citadel.tools.policy import Action, PolicyEngine, Reason
from serving.services.access import Caller
from serving.services.webhooks import DecisionWebhook

if TYPE_CHECKING:
    from citadel.quality.candidates import CandidateQueue
    from serving.services.metrics import ApiMetrics

log = logging.getLogger(__name__)

DECISIONS = {"approve": ApprovalStatus.APPROVED, "edit_and_approve": ApprovalStatus.APPROVED,
             "reject": ApprovalStatus.REJECTED}
# A review task (a failed check) is answered differently: the reviewer corrected the
# source (or, for an action, its arguments: `edits`) and every check runs again; asks for more; or rejects.
REVIEW_DECISIONS = {"correct": ApprovalStatus.APPROVED, "request_info": ApprovalStatus.INFO_REQUESTED,
                    "reject": ApprovalStatus.REJECTED}
EDITING = frozenset({"edit_and_approve", "correct"})
MAX_COMMENT_CHARS = 2_000
STATUSES = {s.value: s for s in ApprovalStatus}
MISSED_MESSAGE = ("This was a deliberately wrong test request, planted to check that reviews catch mistakes: "
                  "{why}. Nothing was run. Your approval is recorded as missed; please reject requests like it.")
CAUGHT_MESSAGE = ("Well caught: this was a deliberately wrong test request, planted to check that reviews catch "
                  "mistakes. Nothing was run; your rejection is recorded as caught.")
GENERIC_WRONG = "it names a customer or values that the tool's policy does not allow"


class ApprovalRefused(CitadelError):
    """The policy engine refused a reviewer's approval or edit; the code is its reason."""

    http_status = 403


class ApprovalsService:
    def __init__(self, approvals: ApprovalStore, runs: RunStore, policy: PolicyEngine | None,
                 restart: Callable[[str], object], *, metrics: ApiMetrics | None = None,
                 candidates: CandidateQueue | None = None, webhook: DecisionWebhook | None = None):
        """`restart(run_id)`: queue the decided run and start it again on this process (the runs
        service's `resume`);
        `metrics`: the process's (None: none counted); `candidates`: where edits and rejections are
        queued as candidate test items (None: nowhere); `webhook`: told of each decision and
        expiry (serving/services/webhooks.py; None: the run's event only)."""
        self.webhook = webhook
        self.approvals = approvals
        self.runs = runs
        self.policy = policy
        self._restart = restart
        self.metrics = metrics
        self.candidates = candidates

    def list(self, caller: Caller, status: str | None = "pending") -> dict:
        wanted = STATUSES.get(status) if status is not None else None
        if status is not None and wanted is None:
            raise InvalidRequest(f"status is one of {sorted(STATUSES)}")
        principal = caller.principal
        found = self.approvals.list(principal.tenant_id, reviewer_names(principal), wanted)
        return {"approvals": [public(a) for a in found]}

    def review_items(self, caller: Caller) -> list[dict]:
        """The reviewer page's pending tasks for the caller (citadel/reviews/items.py)."""
        principal = caller.principal
        found = self.approvals.list(principal.tenant_id, reviewer_names(principal), ApprovalStatus.PENDING)
        return [review_item(a, self.policy.spec(a.tool) if self.policy is not None else None, public(a))
                for a in found]

    def decide(self, caller: Caller, approval_id: str, decision: str, edits: Mapping[str, Any] | None,
               comment: str) -> dict:
        if decision not in DECISIONS and decision not in REVIEW_DECISIONS:
            raise InvalidRequest(f"decision is one of {sorted({*DECISIONS, *REVIEW_DECISIONS})}")
        if len(comment) > MAX_COMMENT_CHARS:
            raise InvalidRequest(f"a comment holds at most {MAX_COMMENT_CHARS:,} characters")
        approval = self._visible(caller, approval_id)
        allowed = decisions_for(approval)
        if decision not in allowed:
            raise InvalidRequest(f"a {approval.kind} is decided with one of {list(allowed)}")
        reviewer = caller.principal
        if not reviewer_names(reviewer) & set(approval.deciders()):
            raise Forbidden(f"only {' or '.join(approval.deciders())} may decide this approval")
        if approval.honeypot:
            return self._decide_honeypot(approval, decision, edits, comment, reviewer)
        corrects_action = approval.kind is TaskKind.REVIEW and approval.reason == ReviewReason.ACTION_OUT_OF_SCOPE
        if edits and approval.kind is TaskKind.REVIEW and not corrects_action:
            raise InvalidRequest("this review corrects the source, not arguments: it takes no edits")
        final = _final_args(approval, decision, edits)
        if final is not None and (approval.kind is TaskKind.APPROVAL or corrects_action):
            # a corrected action is the reviewer's edit of it: within their limit, like an approval's
            self._check(approval, final, reviewer)
        decided = self.approvals.decide(approval_id, allowed[decision], reviewer.user_id, final, comment)
        self._count_real(decided)
        self._record_for_evaluation(decided, decision)
        self._resume_run(decided)
        return public(decided)

    def _resume_run(self, decided: Approval) -> None:
        """Tell the run its approval was decided (or expired), and start it again to act on that. A
        held single-shot answer has no run: the user asks again, and every check runs again."""
        if self.webhook is not None and not decided.honeypot:
            self.webhook.send({"approval_id": decided.approval_id, "kind": str(decided.kind), "tool": decided.tool,
                               "run_id": decided.run_id if has_run(decided) else None,
                               "tenant_id": decided.tenant_id, "status": str(decided.status),
                               "decided_by": decided.decided_by, "decided_at": decided.decided_at})
        if not has_run(decided):
            return
        self.runs.append(decided.run_id, EventType.PROGRESS, {
            "key": f"approval_decided:{decided.approval_id}", "stage": "approval_decided",
            "approval_id": decided.approval_id, "status": str(decided.status), "decided_by": decided.decided_by,
            "final_args": decided.final_args})
        self._restart(decided.run_id)

    def sweep(self) -> tuple[int, int]:
        """Escalate and expire what is due (a timer calls this): an escalation is an event on the run;
        an expiry counts as a rejection — the run gets the event and is restarted to record it and
        answer. Silence never approves. A honeypot has no run: its escalation only reaches the lead
        group's list, its expiry is counted (neither caught nor missed)."""
        escalated, expired = self.approvals.sweep()
        for approval in escalated:
            if approval.honeypot:
                continue
            self.runs.append(approval.run_id, EventType.PROGRESS, {
                "key": f"approval_escalated:{approval.approval_id}", "stage": "approval_escalated",
                "approval_id": approval.approval_id, "deciders": list(approval.deciders())})
        for approval in expired:
            if approval.honeypot:
                if self.metrics is not None:
                    self.metrics.honeypot_decided(approval.approver_group, "expired")
                continue
            self._count_real(approval)
            self._resume_run(approval)
        return len(escalated), len(expired)

    # ------------------------------------------------------------------ how reviews are going
    def review_stats(self, tenant_id: str, groups: Iterable[str] | None = None) -> dict:
        """The tenant's decided approvals, from the store: per team (approver group) the honeypots
        caught, missed and expired and the catch rate (caught / (caught + missed)); per tool the real
        approvals approved (of which edited), rejected and expired, the approval rate (approved over
        all three: expiry counts as rejected) and the median seconds from request to a person's
        decision. A rate or median with nothing to compute it from is None.

        `groups`: whose approvals to count (default: the approver and lead groups of every tool the
        policy engine knows). Bounded by the store's listing: at most MAX_LIST approvals of each
        status, the oldest first; `truncated` says when a bound was reached (the Prometheus metrics
        are the running view)."""
        wanted = sorted(set(groups) if groups is not None else self._review_groups())
        found: list[Approval] = []
        truncated = False
        for status in (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED, ApprovalStatus.EXPIRED):
            some = self.approvals.list(tenant_id, wanted, status, limit=MAX_LIST) if wanted else []
            truncated = truncated or len(some) >= MAX_LIST
            found.extend(some)
        teams: dict[str, dict[str, Any]] = {}
        tools: dict[str, dict[str, Any]] = {}
        times: dict[str, list[float]] = {}
        for approval in found:
            if approval.kind is not TaskKind.APPROVAL:
                continue  # a review task for a failed check is not an approval of the tool's call
            if approval.honeypot:
                team = teams.setdefault(approval.approver_group, {"caught": 0, "missed": 0, "expired": 0})
                team[_honeypot_outcome(approval.status)] += 1
                continue
            tool = tools.setdefault(approval.tool, {"approved": 0, "edited": 0, "rejected": 0, "expired": 0})
            tool[str(approval.status)] += 1
            if approval.status is ApprovalStatus.APPROVED and approval.final_args != approval.proposed_args:
                tool["edited"] += 1
            if approval.status is not ApprovalStatus.EXPIRED and approval.decided_at is not None:
                times.setdefault(approval.tool, []).append(max(0.0, approval.decided_at - approval.created_at))
        for team in teams.values():
            judged = team["caught"] + team["missed"]
            team["catch_rate"] = team["caught"] / judged if judged else None
        for name, tool in tools.items():
            total = tool["approved"] + tool["rejected"] + tool["expired"]
            tool["approval_rate"] = tool["approved"] / total if total else None
            tool["median_decision_s"] = statistics.median(times[name]) if times.get(name) else None
        return {"tenant_id": tenant_id, "teams": dict(sorted(teams.items())), "tools": dict(sorted(tools.items())),
                "truncated": truncated}

    def _review_groups(self) -> set[str]:
        specs = self.policy.specs() if self.policy is not None else ()
        return {group for spec in specs for group in (spec.approver_group, spec.lead_group) if group}

    # ------------------------------------------------------------------ honeypots
    def _decide_honeypot(self, approval: Approval, decision: str, edits: Mapping[str, Any] | None, comment: str,
                         reviewer) -> dict:
        """Record the decision, run nothing, and tell the reviewer at once."""
        final = _final_args(approval, decision, edits)
        if final is not None:
            if self.policy is not None and reviewer.user_id == approval.requester:
                # check_edit's one rule that is not about the arguments, as a real approval answers
                raise ApprovalRefused("a request is approved by someone other than its requester",
                                      code=str(Reason.NOT_PERMITTED))
        decided = self.approvals.decide(approval.approval_id, DECISIONS[decision], reviewer.user_id, final, comment)
        outcome = _honeypot_outcome(decided.status)
        if self.metrics is not None:
            self.metrics.honeypot_decided(decided.approver_group, outcome)
        log.info("honeypot approval %s %s by %s (%s)", decided.approval_id, outcome, decided.decided_by,
                 decided.approver_group)
        caught = outcome == "caught"
        message = CAUGHT_MESSAGE if caught else MISSED_MESSAGE.format(why=self._what_was_wrong(approval))
        return {**public(decided), "honeypot": True, "caught": caught, "message": message}

    def _what_was_wrong(self, approval: Approval) -> str:
        """The limits the honeypot broke (a number compared with a limit), else a general reason."""
        spec = self.policy.spec(approval.tool) if self.policy is not None else None
        if spec is None:
            return GENERIC_WRONG
        args = approval.proposed_args
        over = [f"{name} {_shown_number(args[name])} is above the limit of {_shown_number(limit)}"
                for name, limit in sorted(spec.approver_limit.items())
                if isinstance(args.get(name), (int, float)) and not isinstance(args[name], bool) and args[name] > limit]
        return "; ".join(over) or GENERIC_WRONG

    # ------------------------------------------------------------------ real approvals
    def _count_real(self, decided: Approval) -> None:
        if self.metrics is None or decided.kind is not TaskKind.APPROVAL:
            return
        seconds = None
        if decided.status is not ApprovalStatus.EXPIRED and decided.decided_at is not None:
            seconds = decided.decided_at - decided.created_at
        self.metrics.approval_decided(decided.tool, str(decided.status), seconds)

    def _record_for_evaluation(self, decided: Approval, decision: str) -> None:
        """Queue an edit or a rejection as a candidate test item of its tool (see the module docstring)."""
        if self.candidates is None:
            return
        try:
            self.candidates.add_decision(decided, decision)
        except Exception:  # the decision is recorded already: a lost candidate must not fail it
            log.exception("could not queue approval %s as a candidate item of %s", decided.approval_id,
                          decided.tool)

    def _check(self, approval: Approval, final: dict, reviewer) -> None:
        if self.policy is None:
            return
        verdict = self.policy.check_edit(approval.tool, approval.proposed_args, final, reviewer,
                                         requester_id=approval.requester)
        if verdict.action == Action.REFUSE:
            reason = verdict.reasons[0]
            if reason == Reason.INVALID_ARGS:
                raise InvalidRequest(verdict.detail or "the edited arguments are invalid")
            raise ApprovalRefused(verdict.detail or "the approval was refused", code=str(reason))

    def _visible(self, caller: Caller, approval_id: str) -> Approval:
        approval = self.approvals.get(approval_id)
        if approval is None or approval.tenant_id != caller.principal.tenant_id:
            raise NotFound(f"no approval {approval_id!r}")
        return approval


def reviewer_names(principal) -> set[str]:
    """What a task's deciders are matched against: the reviewer's groups, and their user id (a
    document's owner may name one person rather than a group)."""
    return {*principal.groups, principal.user_id}


def decisions_for(approval: Approval) -> dict[str, ApprovalStatus]:
    return REVIEW_DECISIONS if approval.kind is TaskKind.REVIEW else DECISIONS


def _final_args(approval: Approval, decision: str, edits: Mapping[str, Any] | None) -> dict | None:
    """What a decision approves: the proposal, the proposal with the reviewer's edits, or None (reject,
    request_info)."""
    if decision in ("reject", "request_info"):
        return None
    return {**approval.proposed_args, **dict(edits or {})} if decision in EDITING else dict(approval.proposed_args)


def _shown_number(value: float) -> str:
    if isinstance(value, int) and abs(value) >= 10**15:
        return "a very large number"  # '{:g}' would overflow converting it to float
    return f"{value:g}"


def _honeypot_outcome(status: ApprovalStatus) -> str:
    return {ApprovalStatus.REJECTED: "caught", ApprovalStatus.APPROVED: "missed"}.get(status, "expired")


def public(approval: Approval) -> dict:
    """What a reviewer sees of an approval: never the honeypot flag, and a honeypot's run id without
    its prefix, so a honeypot looks like any other request until it is decided."""
    return {"approval_id": approval.approval_id, "run_id": shown_run_id(approval), "step_id": approval.step_id,
            "tool": approval.tool, "requester": approval.requester, "proposed_args": approval.proposed_args,
            "final_args": approval.final_args, "status": str(approval.status), "approver_group": approval.approver_group,
            "deciders": list(approval.deciders()), "escalated": approval.escalated, "expire_at": approval.expire_at,
            "decided_by": approval.decided_by, "decided_at": approval.decided_at, "comment": approval.comment,
            "created_at": approval.created_at, "kind": str(approval.kind), "reason": approval.reason,
            "decisions": list(decisions_for(approval))}
