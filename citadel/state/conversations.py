"""Conversations and what is derived from them (DESIGN.md §10): messages, the summary of older turns,
and what a user asked to be remembered.

Every summary line names the source it came from (document and version), so the line can be dropped
when the user can no longer read that source; a memory is the user's own words, stored for that user
alone and never cited for policy or figures. Deleting a conversation deletes everything derived from
it (its messages, its summary, the memories taken from it). A conversation idle for
`agent.retention_days` is purged (citadel/catalog/retention.py), and a user can delete all of theirs
at once (`DELETE /v1/me/data`).

Backends implement `ConversationStore` and pass one conformance suite: in process
(`MemoryConversationStore`) and SQLite. Reads are scoped by the caller (the services check that the
conversation is the verified user's before anything else).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol, runtime_checkable

Clock = Callable[[], float]

USER = "user"
ASSISTANT = "assistant"
FROM_USER = "user"  # the source of a memory: the user said it, no document did


@dataclass(frozen=True)
class Conversation:
    conversation_id: str
    tenant_id: str
    user_id: str
    created_at: float = 0.0


@dataclass(frozen=True)
class SourceRef:
    """A document at a version: what a summary line or an answer drew on."""

    document_id: str
    version: int


@dataclass(frozen=True)
class Message:
    conversation_id: str
    role: str  # USER or ASSISTANT
    content: str
    run_id: str | None = None
    sources: tuple[SourceRef, ...] = ()
    seq: int = 0  # assigned by the store: 1, 2, 3 … per conversation
    at: float = 0.0


@dataclass(frozen=True)
class SummaryLine:
    text: str
    source: SourceRef | None  # None only for a line from the user's own words


@dataclass(frozen=True)
class Memory:
    memory_id: str
    tenant_id: str
    user_id: str
    text: str
    conversation_id: str  # where it was said: deleting that conversation deletes it
    origin: str = FROM_USER
    at: float = 0.0


@runtime_checkable
class ConversationStore(Protocol):
    def create(self, conversation: Conversation) -> Conversation: ...

    def get(self, conversation_id: str) -> Conversation | None: ...

    def delete(self, conversation_id: str) -> bool:
        """Delete the conversation, its messages, its summary and the memories taken from it."""

    def add_message(self, message: Message) -> Message:
        """Append a message (its seq and time from the store)."""

    def messages(self, conversation_id: str) -> list[Message]: ...

    def set_summary(self, conversation_id: str, lines: list[SummaryLine], through_seq: int) -> None:
        """Replace the summary of the messages up to `through_seq`."""

    def summary(self, conversation_id: str) -> tuple[list[SummaryLine], int]:
        """(lines, the last message seq they cover); ([], 0) when there is none."""

    def remember(self, memory: Memory) -> Memory: ...

    def memories(self, tenant_id: str, user_id: str) -> list[Memory]: ...

    def delete_user(self, tenant_id: str, user_id: str) -> int:
        """Delete every conversation of this user in this tenant, with everything derived from each, and
        the user's memories; returns how many conversations went."""

    def purge_idle(self, max_idle_s: float) -> int:
        """Delete the conversations in which nothing happened (created, a message, a memory) for
        `max_idle_s` by the store's clock, with everything derived from each; returns how many."""

    def close(self) -> None:
        """Release the backend's connections (a no-op in process)."""


@dataclass
class _Thread:
    conversation: Conversation
    messages: list[Message] = field(default_factory=list)
    summary: list[SummaryLine] = field(default_factory=list)
    summary_through: int = 0


class MemoryConversationStore:
    """In-process conversations, for tests and the one-process default."""

    def __init__(self, clock: Clock):
        self._now = clock
        self._lock = threading.Lock()
        self._threads: dict[str, _Thread] = {}
        self._memories: dict[str, Memory] = {}

    def create(self, conversation: Conversation) -> Conversation:
        with self._lock:
            if conversation.conversation_id in self._threads:
                raise ValueError(f"conversation {conversation.conversation_id!r} exists")
            stored = replace(conversation, created_at=self._now())
            self._threads[conversation.conversation_id] = _Thread(stored)
            return stored

    def get(self, conversation_id: str) -> Conversation | None:
        with self._lock:
            thread = self._threads.get(conversation_id)
            return thread.conversation if thread else None

    def delete(self, conversation_id: str) -> bool:
        with self._lock:
            self._memories = {k: m for k, m in self._memories.items() if m.conversation_id != conversation_id}
            return self._threads.pop(conversation_id, None) is not None

    def add_message(self, message: Message) -> Message:
        with self._lock:
            thread = self._threads[message.conversation_id]
            stored = replace(message, seq=len(thread.messages) + 1, at=self._now())
            thread.messages.append(stored)
            return stored

    def messages(self, conversation_id: str) -> list[Message]:
        with self._lock:
            thread = self._threads.get(conversation_id)
            return list(thread.messages) if thread else []

    def set_summary(self, conversation_id: str, lines: list[SummaryLine], through_seq: int) -> None:
        with self._lock:
            thread = self._threads[conversation_id]
            thread.summary, thread.summary_through = list(lines), through_seq

    def summary(self, conversation_id: str) -> tuple[list[SummaryLine], int]:
        with self._lock:
            thread = self._threads.get(conversation_id)
            return (list(thread.summary), thread.summary_through) if thread else ([], 0)

    def remember(self, memory: Memory) -> Memory:
        with self._lock:
            if memory.conversation_id not in self._threads:
                raise KeyError(memory.conversation_id)
            stored = replace(memory, at=self._now())
            self._memories[memory.memory_id] = stored
            return stored

    def memories(self, tenant_id: str, user_id: str) -> list[Memory]:
        with self._lock:
            return [m for m in self._memories.values() if m.tenant_id == tenant_id and m.user_id == user_id]

    def delete_user(self, tenant_id: str, user_id: str) -> int:
        with self._lock:
            owned = [cid for cid, t in self._threads.items()
                     if (t.conversation.tenant_id, t.conversation.user_id) == (tenant_id, user_id)]
            self._memories = {k: m for k, m in self._memories.items()
                              if (m.tenant_id, m.user_id) != (tenant_id, user_id) and m.conversation_id not in owned}
            for conversation_id in owned:
                del self._threads[conversation_id]
            return len(owned)

    def purge_idle(self, max_idle_s: float) -> int:
        with self._lock:
            cutoff = self._now() - max_idle_s
            idle = [cid for cid, thread in self._threads.items() if self._last_activity(cid, thread) < cutoff]
            self._memories = {k: m for k, m in self._memories.items() if m.conversation_id not in idle}
            for conversation_id in idle:
                del self._threads[conversation_id]
            return len(idle)

    def _last_activity(self, conversation_id: str, thread: _Thread) -> float:
        times = [thread.conversation.created_at, *(m.at for m in thread.messages),
                 *(m.at for m in self._memories.values() if m.conversation_id == conversation_id)]
        return max(times)

    def close(self) -> None:
        return None
