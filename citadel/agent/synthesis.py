"""A run's answer from its numbered evidence (DESIGN.md §10), recorded before it is delivered.

Synthesis goes through the answer service's expander, generator and validator
(`AnswerService.compose_from`). With a reader (`answer.confirm`), a part of the checklist counts as
found only when its asked fact is confirmed (citadel/agent/parts.py), as the single-shot path
confirms an answer: the answer asserts the confirmed parts, names each other part with its closest
evidence quoted and cited, and the outcome is "answered" (some part confirmed), "not_confirmed"
(on-topic evidence, no part confirmed) or "refused" (nothing on topic). An eligibility question's
answer opens with the decision code computes from the numbered sources (citadel/agent/decision.py).
A conflict resolved from the catalog is reported where the answer rests on the winning version; the
answer's checks may hold it for a review (citadel/agent/approval_flow.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from citadel.agent.approval_flow import ApprovalFlow
from citadel.agent.criteria import case_object
from citadel.agent.decision import decide
from citadel.catalog.policies import resolve_policy
from citadel.agent.delivery import actions_note, actions_of, cleaned_verdicts
from citadel.agent.evidence import (UNIFORM_IDF, EvidenceSet, RunEvidence, best_coverage, distinct_parts, on_topic,
                                    passage_tokens)
from citadel.agent.journal import RunJournal, RunState
from citadel.agent.memory import RunConversation
from citadel.agent.parts import (OFFER, PartCheck, asked_text, check_part, in_context, on_topic_parts,
                                 part_passages, unconfirmed_note)
from citadel.agent.plan import SEARCH
from citadel.agent.records import AnswerRecord, RecordKey, succeeded
from citadel.answer.confirm import ConfirmSettings
from citadel.answer.conflicts import resolution_note, resolved_conflicts, superseded_documents
from citadel.answer.links import LinkPolicy
from citadel.answer.service import NOT_CONFIRMED, REFUSAL_REPLIES
from citadel.chunking import count_tokens
from citadel.reviews.tasks import CLOSED, HOLD, Verdict
from citadel.state.runs import EventType
from citadel.text import content_terms
from citadel.types import Degradation, Passage, Principal

log = logging.getLogger(__name__)

# A checklist part is judged by its own words only when it has at least this many distinct terms.
PART_ALONE_MIN_TERMS = 4
# A run with evidence but nothing on topic is refused with this reason (the single-shot gate's).
LOW_COVERAGE = "low_coverage"
# The checklist lines added to the synthesis task, in characters: with the longest message allowed,
# the task stays inside its prompt allowance (agent.prompt_allowances["task"]).
MAX_TASK_LINES_CHARS = 1_500


class PartChecker:
    """Which parts of a run's checklist its evidence confirms (citadel/agent/parts.py), read by the
    single-shot path's reader, confirmation settings, expander and gate, so a run and a single-shot
    answer confirm alike; the catalog's live permissions decide which passages are read."""

    def __init__(self, reader, settings: ConfirmSettings | None, expander, gate, catalog, partitions):
        self.reader = reader
        self.settings = settings or ConfirmSettings()
        self.expander = expander
        self.gate = gate
        self.catalog = catalog
        self.partitions = partitions

    @staticmethod
    def parts(state: RunState) -> list[str]:
        """The checklist parts (of the first plan), then the asks of steps that failed or never ran."""
        first = state.plans[0].done_when if state.plans else ()
        checklist = list(first) or [state.run.question]
        unanswered = [s.ask for s, r in state.step_records() if not succeeded(r)]
        unanswered += [s.ask for s in state.pending()]
        return list(dict.fromkeys(checklist + unanswered))

    def missing(self, state: RunState, evidence: EvidenceSet, checks: list[PartCheck] | None = None) -> list[str]:
        """The parts (`parts`) not found, then the criteria no passage settles. With a reader a part
        is found only when its asked fact is confirmed (`checks`, else confirmed now over the
        evidence); without one, when some evidence passage covers it (the lexical rule)."""
        if checks is None:
            checks, _ = self.checks(state, evidence, list(evidence.passages))
        if checks is None:
            missing = evidence.uncovered(self.parts(state))
        else:
            missing = [c.part for c in checks if not c.confirmed]
        return distinct_parts(missing) + [c.ask for c in evidence.unsettled()]

    def checks(self, state: RunState, evidence: EvidenceSet,
               passages: list[Passage]) -> tuple[list[PartCheck] | None, list[str]]:
        """(each part confirmed or not, with its closest evidence; what degraded): None without a
        reader. Only passages the user can still read are read; a reader that fails confirms nothing
        (`reader_skipped`)."""
        if self.reader is None:
            return None, []
        parts = [p for p in self.parts(state) if p not in evidence.acted]
        live = self.catalog.readable_documents(state.principal)
        passages = [p for p in passages if (doc := live.get(p.document_id)) is not None and doc.version == p.version]
        partition = self.partitions.get(state.principal.tenant_id)
        searches = [(step.ask.lower(), [p["chunk_id"] for p in record.get("passages", [])])
                    for step, record in state.step_records() if step.tool == SEARCH and succeeded(record)]
        contexts = in_context(state.run.question, parts)
        checks, degraded = [], []
        for part in parts:
            # its own searches: the part's, and those of the situation it asks of
            own = [ids for ask, ids in searches if ask and ask in contexts[part].lower()]
            chosen = part_passages(contexts[part], passages, evidence.idf, own)
            check, failed = self._check(state, part, contexts[part], chosen, evidence, partition)
            checks.append(check)
            if failed:
                degraded = [str(Degradation.READER_SKIPPED)]
        return checks, degraded

    def _check(self, state: RunState, part: str, asked: str, chosen: list[Passage], evidence: EvidenceSet,
               partition) -> tuple[PartCheck, bool]:
        """The part confirmed or not from its chosen passages, expanded; whether the reader failed."""
        sources = self.expander.expand(chosen, partition) if chosen else []
        # The single-shot gate's word rule on the part's own passages: the part's words are there,
        # so a slot-holding sentence naming enough of its subject confirms it (confirm.py).
        # (the part alone or in its context: "Are they eligible for the multi-year discount?" names its
        # section's words; its lead-up "Acme renews next month." does not)
        # A part read alone must name enough to be judged: "Am I due for a replacement" matches anything.
        texts = (part, asked) if len(set(content_terms(part))) >= PART_ALONE_MIN_TERMS else (asked,)
        covered = bool(chosen) and max(best_coverage(text, chosen, evidence.idf or UNIFORM_IDF)[0]
                                       for text in texts) >= self.gate.thresholds.min_coverage
        try:
            return check_part(self.reader, part, sources, self.settings, asked, covered), False
        except Exception:  # nothing can be confirmed, so nothing is asserted (as on the single-shot path)
            log.warning("run %s: the reader failed; part not confirmed", state.run_id, exc_info=True)
            return PartCheck(part, False, None, sources[0] if sources else None), True


class Synthesis:
    """`answers`: the answer service whose `compose_from` words the answer; `today`: the ISO date
    deciding which effective dates are in force (and the decision's day); `wall_clock`: the day
    otherwise; `links`: what the verifier's verdicts may carry in an event."""

    def __init__(self, answers, journal: RunJournal, evidence: RunEvidence, parts: PartChecker, flow: ApprovalFlow,
                 conversation: RunConversation, links: LinkPolicy, *, today: Callable[[], str],
                 wall_clock: Callable[[], float]):
        self.answers = answers
        self.journal = journal
        self.evidence = evidence
        self.parts = parts
        self.flow = flow
        self.conversation = conversation
        self.links = links
        self.today = today
        self.wall_clock = wall_clock

    def answer(self, state: RunState, cancelled: bool) -> dict[str, Any] | None:
        """The run's answer as recorded (made now unless a driver before recorded it); None when a
        failed check holds it for a review (the run parks). `cancelled`: answer nothing."""
        record = state.records.get(RecordKey.ANSWER)
        if record is not None:
            return record
        evidence = self.evidence.of(state, pending=False)
        if cancelled:
            return self.journal.record(state, RecordKey.ANSWER,
                                       AnswerRecord.cancelled(self.parts.missing(state, evidence)))
        if not evidence.passages and actions_of(state):  # a run that only acted: its answer is what it did or not
            return self.journal.record(state, RecordKey.ANSWER, AnswerRecord(
                actions_note(state), False, None, missing=self.parts.missing(state, evidence)))
        return self._compose(state, evidence)

    def _compose(self, state: RunState, evidence: EvidenceSet) -> dict[str, Any] | None:
        conflicts = resolved_conflicts(evidence.passages, evidence.records, evidence.today)
        ruled_out = superseded_documents(conflicts)
        passages = [p for p in evidence.passages if p.document_id not in ruled_out]
        checks, degraded = self.parts.checks(state, evidence, passages)
        contexts = in_context(state.run.question, [c.part for c in checks or ()])
        confirmed = [contexts[c.part] for c in checks or () if c.confirmed]
        if checks and passages and not confirmed:  # nothing to assert (a part a tool did is no check)
            unconfirmed = self._unconfirmed(state, evidence, checks, degraded, passages)
            return self._checked(state, evidence, unconfirmed, passages, conflicts, [], 0)
        record, response = self._generated(state, evidence, passages, checks, degraded, confirmed)
        resolved = self._add_notes(record, response.refused, evidence, checks, conflicts)
        return self._checked(state, evidence, record, passages, conflicts, resolved, response.invalid_markers)

    def _generated(self, state: RunState, evidence: EvidenceSet, passages: list[Passage],
                   checks: list[PartCheck] | None, degraded: list[str], confirmed: list[str]):
        """The answer the generator words from the passages, asked only what is confirmed (it asserts
        nothing of the other parts); the record and the answer service's response."""
        partial = checks is not None and len(confirmed) < len(checks)
        question = asked_text(confirmed) if partial else state.run.question
        left_out = [c.part for c in checks or () if not c.confirmed]
        conversation, notes = self.conversation.prompt_items(state)
        response = self.answers.compose_from(state.principal, state.run.question, passages, state.run_id,
                                             task=synthesis_task(state, evidence, question, left_out),
                                             conversation=conversation, notes=notes,
                                             asked=question if partial else None,
                                             lead=self._decision(state, evidence))
        if response.verification is not None:  # the claim verifier's verdicts, shown in the run's events
            self.journal.emit(state, EventType.PROGRESS, "verified", {
                "stage": "verified", **cleaned_verdicts(self.links, state.run.tenant_id, response.verification)})
        tokens = count_tokens(state.run.question) + passage_tokens(passages) + count_tokens(response.answer)
        record = AnswerRecord.of(response, self.parts.missing(state, evidence, checks), tokens)
        record.degraded += [d for d in degraded if d not in record.degraded]
        record.prompt = response.trace.prompt if response.trace is not None else None
        return record, response

    @staticmethod
    def _add_notes(record: AnswerRecord, refused: bool, evidence: EvidenceSet, checks: list[PartCheck] | None,
                   conflicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A resolution is reported where the answer rests on the version that won it, and a partial
        answer says what it lacks; the resolved conflicts the answer reports."""
        cited = {c["document_id"] for c in record.citations}
        resolved = [{**c, "note": resolution_note(c, evidence.records)} for c in conflicts
                    if c["resolved_to"] in cited]
        if resolved and not refused:
            record.answer = " ".join([record.answer, *(c["note"] for c in resolved if c["note"])])
        if record.missing and not refused:
            if checks is None:
                note = missing_note(record.missing)
            else:  # each part not confirmed with its closest evidence, cited after the answer's own
                record.citations = list(record.citations)
                note = unconfirmed_note(named(checks, record.missing), record.citations,
                                        [c.ask for c in evidence.unsettled()])
            record.answer = f"{record.answer} {note}"
        return resolved

    def _checked(self, state: RunState, evidence: EvidenceSet, record: AnswerRecord, passages: list[Passage],
                 conflicts: list[dict[str, Any]], resolved: list[dict[str, Any]],
                 invalid_markers: int) -> dict[str, Any] | None:
        """The answer's checks, what the run did, then the record; None when a review holds it."""
        verdict = self.flow.answer_verdict(state, evidence, passages, conflicts, record, invalid_markers)
        if verdict.action == HOLD:
            self.flow.review_pending(state, verdict.task)
            return None
        if verdict.action == CLOSED:
            record = closed_record(record, verdict)
        if actions_of(state):
            record.answer = f"{record.answer} {actions_note(state)}"
        record.conflicts = [*record.conflicts, *resolved]
        return self.journal.record(state, RecordKey.ANSWER, record)

    def _unconfirmed(self, state: RunState, evidence: EvidenceSet, checks: list[PartCheck],
                     degraded: list[str], passages: list[Passage]) -> AnswerRecord:
        """No part confirmed: with on-topic evidence the reply asserts nothing, names each part with
        its closest evidence (cited) and offers a person (not_confirmed); with none it is refused."""
        missing = self.parts.missing(state, evidence, checks)
        parts = [c.part for c in checks] or [state.run.question]
        citations: list[dict] = []
        closest = [c for c in checks if c.closest]
        # On topic: a part's closest sentence names enough of its subject, or a passage holds enough of
        # its words (IDF-weighted) — the single-shot path's `topic_coverage`, without its vector signal.
        topic_coverage = self.parts.settings.topic_coverage
        if on_topic_parts(checks, topic_coverage) or (
                closest and on_topic(parts, passages, evidence.idf, topic_coverage)):
            note = unconfirmed_note(named(checks, missing), citations, [c.ask for c in evidence.unsettled()])
            answer, reason = f"{note} {OFFER}", NOT_CONFIRMED
        else:
            answer, reason = REFUSAL_REPLIES[LOW_COVERAGE], LOW_COVERAGE
        tokens = count_tokens(state.run.question) + passage_tokens(passages) + count_tokens(answer)
        return AnswerRecord(answer, True, reason, citations, [], list(degraded), missing, tokens)

    def _decision(self, state: RunState, evidence: EvidenceSet) -> Callable[[Sequence[Any]], Any]:
        """What opens an eligibility question's answer: the decision code computes from the numbered
        sources (citadel/agent/decision.py). It only makes the answer better: if it fails, the answer
        goes without it."""
        decision = functools.partial(decide, state.run.question, today=self._calendar_day(),
                                     earlier=self.conversation.earlier_questions(state), idf=evidence.idf,
                                     policies=functools.partial(self._current_policy, state.principal))

        def lead(sources: Sequence[Any]) -> Any:
            try:
                return decision(sources)
            except Exception:
                log.warning("run %s: no decision (it failed)", state.run_id, exc_info=True)
                return None

        return lead

    def _current_policy(self, principal: Principal, policy_id: str) -> tuple[str, int] | None:
        """The policy's current approved revision the principal may read now, by its id (the catalog,
        not a search): what a rule naming that id must be to decide (citadel/agent/decision.py)."""
        record = resolve_policy(self.parts.catalog, principal, policy_id)
        return None if record is None or record.published_version is None else (
            record.document_id, record.published_version)

    def _calendar_day(self) -> datetime.date:
        """Today for a decision's tenure: the injected `today` where it names a date, else the wall
        clock's day (UTC); never a clock of its own."""
        try:
            return datetime.date.fromisoformat(self.today()[:10])
        except ValueError:
            return datetime.datetime.fromtimestamp(self.wall_clock(), tz=datetime.timezone.utc).date()


def closed_record(record: AnswerRecord, verdict: Verdict) -> AnswerRecord:
    """What a run answers when the review of its held answer did not correct it: nothing of the held
    answer, and what the reviewer said."""
    return dataclasses.replace(
        record, answer=f"The answer was held for a review ({verdict.task.reason}). {verdict.closed_message}",
        refused=True, reason=f"review_{verdict.task.status}", citations=[], conflicts=[])


def named(checks: Sequence[PartCheck], missing: Sequence[str]) -> list[PartCheck]:
    """The checks of the parts the answer names as missing (a part another one repeats is not)."""
    return [c for c in checks if c.part in set(missing)]


def missing_note(missing: list[str]) -> str:
    """The sentence a partial answer ends with, naming what the documents did not confirm."""
    return "The documents found could not confirm: " + "; ".join(missing) + "."


def synthesis_task(state: RunState, evidence: EvidenceSet, question: str | None = None,
                   left_out: Sequence[str] = ()) -> str:
    """What the answer must cover beyond the question, one line each: the first plan's checklist,
    what the case asks to be eligible for (so the rule's grant is quoted), each criterion as the
    rule states it, then each as a fact about the case (so the quote for it is the fact, the rule's
    own wording being quoted already). `question`: what synthesis answers (the run's question, or
    only its confirmed parts); `left_out`: parts not confirmed, which the answer must not assert."""
    question_terms = set(content_terms(question or state.run.question))
    checklist = [p for p in (state.plans[0].done_when if state.plans else ()) if p not in left_out]
    lines = [*checklist, case_object(state.run.question) or "",
             *(f"{c.criterion}: {c.requirement}" for c in evidence.checks), *(c.ask for c in evidence.checks)]
    kept, size = [], 0
    for line in dict.fromkeys(lines):
        if line.strip() and set(content_terms(line)) != question_terms and size + len(line) <= MAX_TASK_LINES_CHARS:
            kept.append(line)
            size += len(line) + 1
    return "\n".join(kept)
