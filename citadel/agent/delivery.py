"""A run's answer as it leaves (DESIGN.md §10): the conversation's assistant turn, the token and
citation events, then the authoritative `final` event and the run's status.

The answer leaves cleaned: a source a step's screen dropped is named in one plain sentence, and the
links policy is applied (citadel/answer/links.py), so neither the token events cut from it nor the
final event carry an image, HTML or a foreign link. Every event is keyed, so a driver that resumes a
delivery cut short appends only what the log lacks.
"""

from __future__ import annotations

import math
from typing import Any

from citadel.agent.journal import RunJournal, RunState
from citadel.agent.memory import RunConversation
from citadel.agent.plan import SEARCH
from citadel.agent.records import StepOutcome, StopReason, record_outcome
from citadel.answer.links import LinkPolicy
from citadel.guardrails.planted import with_screened_notice
from citadel.state.runs import EventType, RunStatus

# Answer text streams in token events of about this many words (more per event for a long answer).
WORDS_PER_TOKEN_EVENT = 8
MAX_TOKEN_EVENTS = 512


class Delivery:
    """`links`: what the answer may link to; `bundle_id`: the config bundle named in a final event
    whose answer was recorded before answers kept theirs."""

    def __init__(self, journal: RunJournal, conversation: RunConversation, links: LinkPolicy,
                 bundle_id: str | None = None):
        self.journal = journal
        self.conversation = conversation
        self.links = links
        self.bundle_id = bundle_id

    def deliver(self, state: RunState, record: dict[str, Any], stop: str | None, path: str) -> None:
        """The conversation's turn, token and citation events, then the authoritative final event
        (with what the synthesis prompt held), then the run's status. `record`: the answer as stored."""
        record = self._outgoing(state, record)
        stop = str(stop) if stop is not None else None
        if stop is None and state.over_budget:  # the answer was given, its spend was not: the budget stopped it
            stop = str(StopReason.USER_BUDGET)
        self.conversation.remember_answer(state, record)
        if record.get("prompt"):
            self.journal.emit(state, EventType.PROGRESS, "prompt", {"stage": "prompt", **record["prompt"]})
        for index, piece in enumerate(token_pieces(record["answer"])):
            self.journal.emit(state, EventType.TOKEN, f"token:{index}", {"text": piece})
        for number, citation in enumerate(record["citations"], start=1):
            self.journal.emit(state, EventType.CITATION, f"citation:{number}", {"number": number, **citation})
        self.journal.emit(state, EventType.FINAL, "final", self._final(state, record, stop, path))
        status = (RunStatus.SUCCEEDED if stop is None else RunStatus.CANCELLED if stop == StopReason.CANCELLED
                  else RunStatus.STOPPED)
        self.journal.update(state, status=status, stop_reason=stop)

    def _final(self, state: RunState, record: dict[str, Any], stop: str | None, path: str) -> dict[str, Any]:
        return {
            "answer": record["answer"], "outcome": record_outcome(record),
            "refused": record["refused"], "reason": record["reason"],
            "citations": record["citations"], "conflicts": record["conflicts"], "degraded": record["degraded"],
            "path": path, "stop_reason": stop, "missing": record["missing"], "steps": state.executed(),
            "actions": actions_of(state),
            # the recorded answer's bundle: a run resumed under another config names the one that answered
            "bundle_id": record.get("bundle_id", self.bundle_id)}

    def _outgoing(self, state: RunState, record: dict[str, Any]) -> dict[str, Any]:
        """The answer as it may leave: a source a step's screen dropped is named in one plain sentence
        (once: the synthesis may have said it already), and the links policy applied."""
        answer = record.get("answer") or ""
        if any(r.get("screened") or r.get("screened_response") for _, r in state.step_records()):
            answer = with_screened_notice(answer)
        return {**record, "answer": self.links.clean(answer, state.run.tenant_id)}


def cleaned_verdicts(links: LinkPolicy, tenant_id: str, verification: dict[str, Any]) -> dict[str, Any]:
    """The verifier's verdicts as an event may carry them: their claim texts (drafts, before the
    links policy) cleaned like the answer, so no event carries an image or a foreign link."""
    clean = lambda text: links.clean(text, tenant_id) if isinstance(text, str) else text  # noqa: E731
    verdicts = [{**v, "claim": clean(v.get("claim")), "corrected": clean(v.get("corrected"))}
                for v in verification.get("verdicts", [])]
    return {**verification, "verdicts": verdicts}


def actions_of(state: RunState) -> list[dict[str, Any]]:
    """The steps that called a tool other than search: what each did (its system's answer) or why not."""
    return [{"step_id": step.id, "tool": step.tool, "status": record.get("status"), "error": record.get("error"),
             "result": record.get("result"), **({"comment": record["comment"]} if record.get("comment") else {})}
            for step, record in state.step_records() if step.tool != SEARCH]


def actions_note(state: RunState) -> str:
    """What the run did and what it could not do, naming each record its tools made by id."""
    sentences = []
    for action in actions_of(state):
        if action["status"] == StepOutcome.OK:
            result = action["result"] if isinstance(action["result"], dict) else {}
            ids = [f"{k} {v}" for k, v in result.items() if k.endswith("_id") and k != "account_id" and
                   k != "external_id" and isinstance(v, (str, int))]
            sentences.append(f"Done: {action['tool']}" + (f" ({', '.join(ids)})." if ids else "."))
        else:
            said = f": {action['comment']}" if action.get("comment") else ""  # a reviewer's word, to the requester
            sentences.append(f"Not done: {action['tool']} ({action['error']}{said}).")
    return " ".join(sentences)


def token_pieces(answer: str) -> list[str]:
    """The answer in pieces of a few words; joined, they are the answer exactly."""
    words = answer.split(" ")
    if not answer:
        return []
    size = max(WORDS_PER_TOKEN_EVENT, math.ceil(len(words) / MAX_TOKEN_EVENTS))
    groups = [" ".join(words[i:i + size]) for i in range(0, len(words), size)]
    return [groups[0], *(" " + g for g in groups[1:])]
