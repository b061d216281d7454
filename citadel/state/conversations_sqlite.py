"""SQLite conversations (DESIGN.md §10): messages, summaries and memories in the runs file.

This module owns the conversation tables; the file, its connection discipline and the error mapping
(every sqlite3 error → StateUnavailable, its text in the log) come from citadel/state/sqlite_file.py,
so it and the run store can share `CitadelConfig.runs_path`. A message's seq is assigned inside its write
transaction; deleting a conversation removes it, its messages, its summary and the memories taken from
it in one transaction, so nothing derived from a deleted conversation outlives it, even after a crash.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

from citadel.state.conversations import Clock, Conversation, Memory, Message, SourceRef, SummaryLine
from citadel.state.sqlite_file import SQLiteFile

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS conversations (
        conversation_id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        created_at REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS conversation_messages (
        conversation_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        run_id TEXT,
        sources_json TEXT NOT NULL,
        at REAL NOT NULL,
        UNIQUE (conversation_id, seq))""",
    """CREATE TABLE IF NOT EXISTS conversation_summaries (
        conversation_id TEXT PRIMARY KEY,
        lines_json TEXT NOT NULL,
        through_seq INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS conversation_memories (
        memory_id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        text TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        origin TEXT NOT NULL,
        at REAL NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS conversation_memories_owner ON conversation_memories (tenant_id, user_id)",
    "CREATE INDEX IF NOT EXISTS conversation_memories_source ON conversation_memories (conversation_id)",
)

# Conversations created, last written to (a message) and last remembered from before the cutoff.
_IDLE_CONVERSATIONS = (
    "SELECT c.conversation_id FROM conversations c WHERE c.created_at < ? "
    "AND NOT EXISTS (SELECT 1 FROM conversation_messages m WHERE m.conversation_id = c.conversation_id AND m.at >= ?) "
    "AND NOT EXISTS (SELECT 1 FROM conversation_memories k WHERE k.conversation_id = c.conversation_id AND k.at >= ?)")

# The longest message, memory or summary (as JSON) stored, in characters: the API refuses far less
# (agent.max_message_chars); this only stops a runaway caller from filling the file.
MAX_TEXT_CHARS = 1_000_000

_MEMORY_COLUMNS = "memory_id, tenant_id, user_id, text, conversation_id, origin, at"


class SQLiteConversationStore:
    """Conversations in a SQLite file, implementing `ConversationStore` (citadel/state/conversations.py)."""

    def __init__(self, path: str | Path, clock: Clock):
        self._now = clock
        self._file = SQLiteFile(path, _SCHEMA, "conversation store")

    def close(self) -> None:
        self._file.close()

    def create(self, conversation: Conversation) -> Conversation:
        stored = replace(conversation, created_at=self._now())
        with self._file.write() as db:
            inserted = db.execute(
                "INSERT OR IGNORE INTO conversations (conversation_id, tenant_id, user_id, created_at) "
                "VALUES (?, ?, ?, ?)",
                (stored.conversation_id, stored.tenant_id, stored.user_id, stored.created_at),
            ).rowcount
            if not inserted:
                raise ValueError(f"conversation {conversation.conversation_id!r} exists")
        return stored

    def get(self, conversation_id: str) -> Conversation | None:
        rows = self._file.read(
            "SELECT conversation_id, tenant_id, user_id, created_at FROM conversations WHERE conversation_id = ?",
            (conversation_id,),
        )
        return Conversation(*rows[0]) if rows else None

    def delete(self, conversation_id: str) -> bool:
        with self._file.write() as db:
            return _delete(db, conversation_id)

    def delete_user(self, tenant_id: str, user_id: str) -> int:
        with self._file.write() as db:
            owned = [cid for (cid,) in db.execute(
                "SELECT conversation_id FROM conversations WHERE tenant_id = ? AND user_id = ?", (tenant_id, user_id))]
            for conversation_id in owned:
                _delete(db, conversation_id)
            db.execute("DELETE FROM conversation_memories WHERE tenant_id = ? AND user_id = ?", (tenant_id, user_id))
        self._file.checkpoint()
        return len(owned)

    def purge_idle(self, max_idle_s: float) -> int:
        cutoff = self._now() - max_idle_s
        with self._file.write() as db:
            idle = [cid for (cid,) in db.execute(_IDLE_CONVERSATIONS, (cutoff, cutoff, cutoff))]
            for conversation_id in idle:
                _delete(db, conversation_id)
        if idle:
            self._file.checkpoint()
        return len(idle)

    def add_message(self, message: Message) -> Message:
        _bounded("message", message.content)
        sources_json = json.dumps([[s.document_id, s.version] for s in message.sources])
        with self._file.write() as db:
            _require(db, message.conversation_id)
            (last,) = db.execute("SELECT COALESCE(MAX(seq), 0) FROM conversation_messages WHERE conversation_id = ?",
                                 (message.conversation_id,)).fetchone()
            stored = replace(message, sources=tuple(message.sources), seq=last + 1, at=self._now())
            db.execute(
                "INSERT INTO conversation_messages (conversation_id, seq, role, content, run_id, sources_json, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (stored.conversation_id, stored.seq, stored.role, stored.content, stored.run_id, sources_json,
                 stored.at),
            )
        return stored

    def messages(self, conversation_id: str) -> list[Message]:
        rows = self._file.read(
            "SELECT role, content, run_id, sources_json, seq, at FROM conversation_messages "
            "WHERE conversation_id = ? ORDER BY seq",
            (conversation_id,),
        )
        return [Message(conversation_id, role, content, run_id, _sources(sources), seq, at)
                for role, content, run_id, sources, seq, at in rows]

    def set_summary(self, conversation_id: str, lines: list[SummaryLine], through_seq: int) -> None:
        lines_json = _bounded("summary", json.dumps([_line_json(line) for line in lines]))
        with self._file.write() as db:
            _require(db, conversation_id)
            db.execute(
                "INSERT INTO conversation_summaries (conversation_id, lines_json, through_seq) VALUES (?, ?, ?) "
                "ON CONFLICT (conversation_id) DO UPDATE SET lines_json = excluded.lines_json, "
                "through_seq = excluded.through_seq",
                (conversation_id, lines_json, int(through_seq)),
            )

    def summary(self, conversation_id: str) -> tuple[list[SummaryLine], int]:
        rows = self._file.read(
            "SELECT lines_json, through_seq FROM conversation_summaries WHERE conversation_id = ?",
            (conversation_id,),
        )
        if not rows:
            return [], 0
        lines_json, through_seq = rows[0]
        return [_line(item) for item in json.loads(lines_json)], through_seq

    def remember(self, memory: Memory) -> Memory:
        _bounded("memory", memory.text)
        stored = replace(memory, at=self._now())
        with self._file.write() as db:
            _require(db, memory.conversation_id)
            # An upsert, not INSERT OR REPLACE: the row keeps its place, so `memories` keeps its order.
            db.execute(
                f"INSERT INTO conversation_memories ({_MEMORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (memory_id) DO UPDATE SET tenant_id = excluded.tenant_id, "
                "user_id = excluded.user_id, text = excluded.text, conversation_id = excluded.conversation_id, "
                "origin = excluded.origin, at = excluded.at",
                (stored.memory_id, stored.tenant_id, stored.user_id, stored.text, stored.conversation_id,
                 stored.origin, stored.at),
            )
        return stored

    def memories(self, tenant_id: str, user_id: str) -> list[Memory]:
        rows = self._file.read(
            f"SELECT {_MEMORY_COLUMNS} FROM conversation_memories WHERE tenant_id = ? AND user_id = ? ORDER BY rowid",
            (tenant_id, user_id),
        )
        return [Memory(*row) for row in rows]


def _delete(db: sqlite3.Connection, conversation_id: str) -> bool:
    """The conversation and everything derived from it, inside the caller's write transaction."""
    # Memories first and regardless of the conversation row, like the in-process store.
    db.execute("DELETE FROM conversation_memories WHERE conversation_id = ?", (conversation_id,))
    db.execute("DELETE FROM conversation_summaries WHERE conversation_id = ?", (conversation_id,))
    db.execute("DELETE FROM conversation_messages WHERE conversation_id = ?", (conversation_id,))
    return db.execute("DELETE FROM conversations WHERE conversation_id = ?", (conversation_id,)).rowcount == 1


def _bounded(what: str, text: str) -> str:
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"{what} of {len(text)} characters exceeds {MAX_TEXT_CHARS}")
    return text


def _require(db: sqlite3.Connection, conversation_id: str) -> None:
    """KeyError for an unknown conversation, checked inside the caller's write transaction."""
    if db.execute("SELECT 1 FROM conversations WHERE conversation_id = ?", (conversation_id,)).fetchone() is None:
        raise KeyError(conversation_id)


def _sources(sources_json: str) -> tuple[SourceRef, ...]:
    return tuple(SourceRef(document_id, version) for document_id, version in json.loads(sources_json))


def _line_json(line: SummaryLine) -> dict:
    source = None if line.source is None else [line.source.document_id, line.source.version]
    return {"text": line.text, "source": source}


def _line(item: dict) -> SummaryLine:
    source = item["source"]
    return SummaryLine(item["text"], None if source is None else SourceRef(source[0], source[1]))
