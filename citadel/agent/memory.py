"""Conversation memory (DESIGN.md §10): recent turns verbatim, older turns as a summary whose every
line names its source, and what the user asked to be remembered — all of it under the permissions of
what it came from.

The logic over `citadel.state.conversations.ConversationStore` (which only stores):
- `record_question` / `record_answer` / `record_turn` append a turn. An answer's sources are given in
  citation order (its `[n]` is `sources[n-1]`, as `compose` numbers them), which is what lets the
  summary say which source each sentence came from.
- `context(conversation_id, principal)`: the last `summarize_after_turns` turns verbatim; older turns
  folded into summary lines — one per cited source of each older answer, holding the sentences the
  answer said from it (extractive and deterministic: no model), plus one per older question in the
  user's words. Folding is written back when an answer is recorded; turns not yet folded are folded
  on the fly, so a crash between the two loses nothing.
- The live check, each time the context is built: a summary line, or a verbatim answer, is used only
  when the principal can read its source document NOW, at the SAME version (`readable_documents`).
  Same version, not merely readable: a line is a claim taken from that version, and once the document
  has a newer version (or was superseded or withdrawn) the claim may be stale; the run retrieves the
  current text instead. Lines are dropped from the context, not from the store, so a user whose
  access returns gets them back; `ConversationContext.withheld` counts what was dropped, never its text.
- Remembering: a sentence of a user message that asks for it ("remember that I manage the EMEA team",
  "please note: …") is stored with `store.remember` for that tenant and user alone, marked as from the
  user. Notes come back as the user's own words, labelled so in the prompt, and are never sources (they
  are `PromptItem`s of the notes part, never `Source`s). Card numbers and secrets are never remembered.
- `forget(conversation_id)` deletes the conversation and what was derived from it (the store cascades:
  messages, summary, the memories taken from it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from citadel import regex
from citadel.answer.validator import marker_numbers, split_claims, strip_markers
from citadel.catalog.base import ReadableDoc
from citadel.config import AgentConfig
from citadel.errors import NotFound
from citadel.guardrails.pii import sensitive_data_kind
from citadel.prompting.prompt import PromptItem
from citadel.state.conversations import (ASSISTANT, FROM_USER, USER, ConversationStore, Memory, Message, SourceRef,
                                         SummaryLine)
from citadel.types import Principal, content_hash

# Bounds: only the start of a message is scanned for requests to remember; a note, a summary line and
# a line quoting the user are capped; a message yields a few notes at most; the prompt gets the newest
# notes; the stored summary keeps its newest lines.
MAX_SCAN_CHARS = 4_000
MAX_NOTE_CHARS = 400
MAX_NOTES_PER_MESSAGE = 3
MAX_NOTES_IN_CONTEXT = 20
MAX_LINE_CHARS = 300
MAX_SUMMARY_LINES = 400
ELLIPSIS = "…"

# "remember that …", "please note: …", "keep in mind, …", "don't forget that …", "for future reference: …".
REMEMBER = regex.compile(
    "agent.memory.remember",
    r"^\s*(?:(?:please|kindly|also|and)[\s,]+){0,3}"
    r"(?P<verb>remember|note|keep\s+in\s+mind|don['’]?t\s+forget|do\s+not\s+forget|"
    r"for\s+(?:future\s+)?reference|fyi)\b"
    r"(?P<joiner>\s+that\b|\s*[:,\-–—])?\s*",
    regex.IGNORECASE,
)
# Without "that" or a colon, "remember …" is a request only when a statement about the user follows
# ("remember I manage …"), not "note the deadline" or "remember the old policy".
FIRST_PERSON = regex.compile("agent.memory.first_person", r"^(?:i|i['’]m|i['’]ve|my|we|we['’]re|our|me)\b",
                             regex.IGNORECASE)
# "for future reference" and "fyi" need a colon or comma after them to be a request.
NEEDS_JOINER = ("for", "fyi")


# --------------------------------------------------------------------------- what the user asks to keep


def requested_notes(message: str) -> list[str]:
    """The facts a message asks to be remembered, in the user's words (one per sentence that asks),
    at most MAX_NOTES_PER_MESSAGE. Questions, over-long facts and anything holding a card number or
    a secret are not notes."""
    notes: list[str] = []
    for sentence in split_claims(message[:MAX_SCAN_CHARS]):
        fact = _requested_fact(sentence)
        if fact and fact not in notes:
            notes.append(fact)
        if len(notes) >= MAX_NOTES_PER_MESSAGE:
            break
    return notes


def _requested_fact(sentence: str) -> str | None:
    match = REMEMBER.match(sentence)
    if match is None:
        return None
    fact = sentence[match.end():].strip()
    verb, joiner = match.group("verb").lower(), match.group("joiner")
    if joiner is None and (verb.startswith(NEEDS_JOINER) or FIRST_PERSON.match(fact) is None):
        return None
    if not fact or fact.endswith("?") or len(fact) > MAX_NOTE_CHARS or sensitive_data_kind(fact):
        return None
    return fact[:1].upper() + fact[1:]


# --------------------------------------------------------------------------- summary lines


def bounded(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """Whole sentences of `text` up to `limit` characters; a first sentence longer than that is cut
    at a word, marked with an ellipsis (a summary line must stay a line)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    kept = ""
    for sentence in split_claims(text):
        candidate = f"{kept} {sentence}".strip()
        if len(candidate) > limit:
            break
        kept = candidate
    if kept:
        return kept
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + ELLIPSIS


def answer_lines(message: Message) -> list[SummaryLine]:
    """One line per source an answer cited: the answer's sentences that cite it, markers removed.
    Sentences citing nothing are not summarised: a line must name its source."""
    said: dict[SourceRef, list[str]] = {}
    for claim in split_claims(message.content):
        for number in dict.fromkeys(marker_numbers(claim)):
            if 1 <= number <= len(message.sources):
                sentences = said.setdefault(message.sources[number - 1], [])
                sentence = strip_markers(claim)
                if sentence not in sentences:
                    sentences.append(sentence)
    return [SummaryLine(bounded(" ".join(sentences)), source) for source, sentences in said.items()]


def question_line(message: Message) -> SummaryLine | None:
    """The user's own earlier question, as a line whose source is the user (None)."""
    if sensitive_data_kind(message.content):
        return None
    text = bounded(message.content)
    return SummaryLine(text, None) if text else None


def summary_lines(turn: Sequence[Message]) -> list[SummaryLine]:
    lines: list[SummaryLine] = []
    for message in turn:
        if message.role == USER:
            line = question_line(message)
            lines.extend([line] if line else [])
        elif message.role == ASSISTANT:
            lines.extend(answer_lines(message))
    return lines


def turns_of(messages: Sequence[Message]) -> list[list[Message]]:
    """Messages grouped into turns: each user message opens one; answers join the open turn."""
    turns: list[list[Message]] = []
    for message in messages:
        if message.role == USER or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def still_readable(source: SourceRef, readable: Mapping[str, ReadableDoc]) -> bool:
    """The live check: the principal may read the document now, at the version the line came from."""
    document = readable.get(source.document_id)
    return document is not None and document.version == source.version


# --------------------------------------------------------------------------- the context


@dataclass(frozen=True)
class ConversationContext:
    """What the next prompt may know of the conversation, already live-checked for the principal."""

    conversation_id: str
    summary: tuple[SummaryLine, ...]  # older turns: lines whose source is readable now, and the user's own
    turns: tuple[Message, ...]  # the recent turns verbatim (answers whose sources are all readable now)
    notes: tuple[Memory, ...]  # what the user asked to be remembered: their words, never a source
    withheld: int = 0  # summary lines and answers dropped by the live check (their text is not here)
    titles: Mapping[str, str] = field(default_factory=dict)  # document id → title, to name sources

    def conversation_items(self) -> list[PromptItem]:
        """The conversation part of the prompt, oldest first: summary lines, each naming its source
        (a document and version, or the user), then the recent turns. Old answers lose their [n]
        markers (those numbers meant other sources) and name their documents instead."""
        items = [PromptItem(f"summary {i}", self._summary_text(line)) for i, line in enumerate(self.summary, 1)]
        for message in self.turns:
            if message.role == USER:
                items.append(PromptItem(f"turn {message.seq}", f"User: {message.content}"))
            else:
                named = f" (from {self._names(message.sources)})" if message.sources else ""
                items.append(PromptItem(f"turn {message.seq}", f"Assistant: {strip_markers(message.content)}{named}"))
        return items

    def note_items(self) -> list[PromptItem]:
        """The notes part: the user's own words, oldest first (the prompt's header labels them)."""
        return [PromptItem(f"note {note.memory_id}", f"The user said: {note.text}") for note in self.notes]

    def _summary_text(self, line: SummaryLine) -> str:
        if line.source is None:
            return f"Earlier the user asked: {line.text}"
        return f"Earlier answer (from {self._names([line.source])}): {line.text}"

    def _names(self, sources: Iterable[SourceRef]) -> str:
        names = dict.fromkeys(f"\"{self.titles.get(s.document_id, s.document_id)}\" version {s.version}"
                              for s in sources)
        return "; ".join(names)


@dataclass(frozen=True)
class RecordedQuestion:
    message: Message
    notes: tuple[Memory, ...]  # what this message asked to be remembered (stored)


@dataclass(frozen=True)
class RecordedTurn:
    question: Message
    answer: Message
    notes: tuple[Memory, ...]


class ConversationMemory:
    """Records turns, builds the live-checked context, remembers what the user asks, forgets on delete."""

    def __init__(self, store: ConversationStore, catalog, config: AgentConfig):
        """`config.summarize_after_turns`: how many recent turns stay verbatim."""
        self.store = store
        self.catalog = catalog
        self.keep_turns = config.summarize_after_turns

    # ------------------------------------------------------------------ writing
    def record_question(self, conversation_id: str, principal: Principal, content: str,
                        run_id: str | None = None) -> RecordedQuestion:
        """Append the user's message, and store what it asks to be remembered for this user alone."""
        conversation = self._owned(conversation_id, principal)
        message = self.store.add_message(Message(conversation.conversation_id, USER, content, run_id))
        notes = tuple(self._remember(conversation_id, principal, fact) for fact in requested_notes(content))
        return RecordedQuestion(message, tuple(n for n in notes if n is not None))

    def record_answer(self, conversation_id: str, principal: Principal, answer: str,
                      sources: Sequence[SourceRef], run_id: str | None = None) -> Message:
        """Append the answer; `sources` in citation order ([n] is sources[n-1]). Folds turns that
        fell out of the verbatim window into the stored summary."""
        self._owned(conversation_id, principal)
        message = self.store.add_message(Message(conversation_id, ASSISTANT, answer, run_id, tuple(sources)))
        self._fold(conversation_id)
        return message

    def record_turn(self, conversation_id: str, principal: Principal, question: str, answer: str,
                    sources: Sequence[SourceRef], run_id: str | None = None) -> RecordedTurn:
        asked = self.record_question(conversation_id, principal, question, run_id)
        answered = self.record_answer(conversation_id, principal, answer, sources, run_id)
        return RecordedTurn(asked.message, answered, asked.notes)

    def remember(self, conversation_id: str, principal: Principal, text: str) -> Memory | None:
        """Store `text` as a note of this user (an explicit request, e.g. from a tool); None when it
        is empty, too long or holds sensitive data."""
        self._owned(conversation_id, principal)
        text = text.strip()
        if not text or len(text) > MAX_NOTE_CHARS or sensitive_data_kind(text):
            return None
        return self._remember(conversation_id, principal, text)

    def forget(self, conversation_id: str, principal: Principal | None = None) -> bool:
        """Delete the conversation and everything derived from it (messages, summary, the memories
        taken from it). With a principal, only that user's conversation (else NotFound)."""
        if principal is not None:
            self._owned(conversation_id, principal)
        return self.store.delete(conversation_id)

    # ------------------------------------------------------------------ reading
    def context(self, conversation_id: str, principal: Principal) -> ConversationContext:
        """Recent turns verbatim, older ones as summary lines, the user's notes — each line and each
        answer checked live against what the principal can read now."""
        self._owned(conversation_id, principal)
        readable = self.catalog.readable_documents(principal)
        stored, through = self.store.summary(conversation_id)
        turns = turns_of([m for m in self.store.messages(conversation_id) if m.seq > through])
        split = max(len(turns) - self.keep_turns, 0)
        older, recent = turns[:split], turns[split:]
        lines = stored + [line for turn in older for line in summary_lines(turn)]
        kept_lines = [line for line in lines if line.source is None or still_readable(line.source, readable)]
        messages = [m for turn in recent for m in turn]
        kept_messages = [m for m in messages
                         if m.role != ASSISTANT or all(still_readable(s, readable) for s in m.sources)]
        withheld = len(lines) - len(kept_lines) + len(messages) - len(kept_messages)
        titles = {d: doc.title for d, doc in readable.items() if doc.title}
        return ConversationContext(conversation_id, tuple(kept_lines), tuple(kept_messages),
                                   self.notes(principal), withheld, titles)

    def notes(self, principal: Principal) -> tuple[Memory, ...]:
        """The user's notes (this tenant and user only), newest MAX_NOTES_IN_CONTEXT, oldest first,
        each text once."""
        memories = sorted((m for m in self.store.memories(principal.tenant_id, principal.user_id)
                           if m.origin == FROM_USER and m.tenant_id == principal.tenant_id
                           and m.user_id == principal.user_id), key=lambda m: m.at)
        unique = list({m.text: m for m in memories}.values())
        return tuple(sorted(unique, key=lambda m: m.at)[-MAX_NOTES_IN_CONTEXT:])

    # ------------------------------------------------------------------ internals
    def _owned(self, conversation_id: str, principal: Principal):
        """The conversation, if it is this user's; another user's looks absent (NotFound, a 404)."""
        conversation = self.store.get(conversation_id)
        if conversation is None or (conversation.tenant_id, conversation.user_id) != (principal.tenant_id,
                                                                                       principal.user_id):
            raise NotFound(f"conversation {conversation_id!r} not found")
        return conversation

    def _remember(self, conversation_id: str, principal: Principal, text: str) -> Memory | None:
        """Store a note once per conversation (a replayed step does not add it twice)."""
        memory_id = content_hash(f"{principal.tenant_id}\n{principal.user_id}\n{conversation_id}\n{text}")[:32]
        existing = {m.memory_id: m for m in self.store.memories(principal.tenant_id, principal.user_id)}
        if memory_id in existing:
            return existing[memory_id]
        return self.store.remember(Memory(memory_id, principal.tenant_id, principal.user_id, text, conversation_id,
                                          FROM_USER))

    def _fold(self, conversation_id: str) -> None:
        """Write turns older than the verbatim window into the stored summary (newest lines kept)."""
        stored, through = self.store.summary(conversation_id)
        turns = turns_of([m for m in self.store.messages(conversation_id) if m.seq > through])
        split = len(turns) - self.keep_turns
        if split <= 0:
            return
        older = turns[:split]
        lines = stored + [line for turn in older for line in summary_lines(turn)]
        self.store.set_summary(conversation_id, lines[-MAX_SUMMARY_LINES:], older[-1][-1].seq)


def source_refs(citations: Iterable[Mapping]) -> tuple[SourceRef, ...]:
    """An answer's citations (dicts with document_id and version, in [n] order) as SourceRefs."""
    return tuple(SourceRef(str(c["document_id"]), int(c["version"])) for c in citations)


class RunConversation:
    """A run's view of its conversation (`state`: the drive's RunState, citadel/agent/journal.py):
    the context, live-checked once per drive, that plans and synthesis read, the user's earlier
    questions, and the answer recorded as the assistant's turn. Without a memory (a benchmark, a
    test) a run has no conversation."""

    def __init__(self, memory: ConversationMemory | None):
        self.memory = memory

    def context(self, state) -> ConversationContext | None:
        """The conversation so far, less this run's own question, live-checked when first needed in
        this drive: a summary line or an answer whose source the user can no longer read is not in
        it. None outside a stored conversation."""
        if state.context is None and self.memory is not None:
            try:
                context = self.memory.context(state.run.conversation_id, state.principal)
            except NotFound:
                return None
            state.context = dataclasses.replace(context, turns=tuple(m for m in context.turns
                                                                     if m.run_id != state.run_id))
        return state.context

    def prompt_items(self, state) -> tuple[list[PromptItem], list[PromptItem]]:
        """The conversation part and the notes part of the synthesis prompt."""
        context = self.context(state)
        return (context.conversation_items(), context.note_items()) if context is not None else ([], [])

    def earlier_questions(self, state) -> tuple[str, ...]:
        """What the user asked before in this conversation, in their own words, oldest first."""
        context = self.context(state)
        if context is None:
            return ()
        return (*(line.text for line in context.summary if line.source is None),
                *(m.content for m in context.turns if m.role == USER))

    def remember_answer(self, state, record: Mapping) -> None:
        """The answer as the conversation's assistant turn, once (a resumed driver finds it there)."""
        if self.memory is None:
            return
        try:
            messages = self.memory.store.messages(state.run.conversation_id)
            if not any(m.run_id == state.run_id and m.role == ASSISTANT for m in messages):
                self.memory.record_answer(state.run.conversation_id, state.principal, record["answer"],
                                          source_refs(record["citations"]), state.run_id)
        except NotFound:
            return
