"""The pause switch: an admin pauses the model or a tool, per tenant or everywhere,
without a restart. Paused tools refuse with `tool_paused`; everything else keeps working.

A pause names a target — a tool name, or "model" (`MODEL_TARGET`, a name no tool may take) — and a
scope: one tenant, or None for everywhere. A target is paused for a tenant when either its tenant
pause or its everywhere pause is set; resuming one scope never lifts the other, so an admin who lifts
a tenant's pause does not silently undo a global one.

Two backends pass one conformance suite (tests/conformance/test_pause_switch.py): `MemoryPauseSwitch`
(one process, tests) and `SQLitePauseSwitch`, one small table in a file every process of the machine
opens. Every `is_paused` reads the file, so another process's pause takes effect without a restart;
to keep a hot path cheap the read may be served from a cache at most `cache_ttl_s` old (≤ 1 s, 0 turns
it off). A process's own pause or resume clears its cache at once. A file that cannot be read raises
StateUnavailable: callers treat that as "do not run" (fail closed), never as "not paused".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from citadel.errors import InvalidRequest
from citadel.state.sqlite_file import SQLiteFile
from citadel.tools.spec import MODEL_TARGET, TOOL_NAME_PATTERN
from citadel.types import validate_tenant_id

# A table of pauses is short; this bounds a runaway script and every read of the table.
MAX_PAUSES = 10_000
MAX_CACHE_TTL_S = 1.0
DEFAULT_CACHE_TTL_S = 0.25
# The scope column's value for "everywhere": a tenant id never starts with "*" (citadel.types).
_EVERYWHERE = "*"

_SCHEMA = ("""CREATE TABLE IF NOT EXISTS pauses (
    scope TEXT NOT NULL,
    target TEXT NOT NULL,
    paused_at REAL NOT NULL,
    PRIMARY KEY (scope, target))""",)


@dataclass(frozen=True)
class Pause:
    tenant_id: str | None  # None: everywhere
    target: str  # a tool name or "model"
    paused_at: float


class PauseSwitch(Protocol):
    def pause(self, tenant_id: str | None, target: str) -> None:
        """Pause `target` for one tenant, or everywhere (None). Pausing twice keeps the first time."""

    def resume(self, tenant_id: str | None, target: str) -> None:
        """Lift exactly that pause (a no-op when it is not set); the other scope's pause stays."""

    def is_paused(self, tenant_id: str, target: str) -> bool:
        """Is `target` paused for this tenant (its own pause or the everywhere pause)?"""

    def paused(self) -> list[Pause]:
        """Every pause set, ordered by target, the everywhere pause first."""

    def close(self) -> None: ...


def _checked(tenant_id: str | None, target: str) -> tuple[str | None, str]:
    if tenant_id is not None:
        validate_tenant_id(tenant_id)
    if not isinstance(target, str) or (target != MODEL_TARGET and TOOL_NAME_PATTERN.fullmatch(target) is None):
        raise InvalidRequest(f"a pause names {MODEL_TARGET!r} or a tool name such as 'crm.add_note'",
                             code="invalid_pause_target")
    return tenant_id, target


def _ordered(pauses: list[Pause]) -> list[Pause]:
    return sorted(pauses, key=lambda p: (p.target, p.tenant_id is not None, p.tenant_id or ""))


def _too_many() -> InvalidRequest:
    return InvalidRequest(f"at most {MAX_PAUSES} pauses may be set", code="too_many_pauses")


class MemoryPauseSwitch:
    """Pauses of this process only (tests, a single-process deployment)."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._lock = threading.Lock()
        self._pauses: dict[tuple[str | None, str], float] = {}

    def pause(self, tenant_id: str | None, target: str) -> None:
        key = _checked(tenant_id, target)
        with self._lock:
            if key not in self._pauses and len(self._pauses) >= MAX_PAUSES:
                raise _too_many()
            self._pauses.setdefault(key, self._clock())

    def resume(self, tenant_id: str | None, target: str) -> None:
        key = _checked(tenant_id, target)
        with self._lock:
            self._pauses.pop(key, None)

    def is_paused(self, tenant_id: str, target: str) -> bool:
        with self._lock:
            return (tenant_id, target) in self._pauses or (None, target) in self._pauses

    def paused(self) -> list[Pause]:
        with self._lock:
            return _ordered([Pause(tenant, target, at) for (tenant, target), at in self._pauses.items()])

    def close(self) -> None:
        return None


class SQLitePauseSwitch:
    """Pauses in a SQLite file shared by the processes of one machine (WAL, as the runs file)."""

    def __init__(self, path: str | Path, *, cache_ttl_s: float = DEFAULT_CACHE_TTL_S,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic):
        if not 0.0 <= cache_ttl_s <= MAX_CACHE_TTL_S:
            raise ValueError(f"cache_ttl_s must be 0 to {MAX_CACHE_TTL_S} s: a pause must reach every "
                             "process within a second")
        self._file = SQLiteFile(path, _SCHEMA, "pause switch")
        self._ttl, self._clock, self._monotonic = cache_ttl_s, clock, monotonic
        # (read at, generation, the set of (scope, target)), replaced whole. Our own writes bump the
        # generation, so a read that raced a write of this process is never served afterwards.
        self._cache: tuple[float, int, frozenset[tuple[str, str]]] | None = None
        self._generation = 0

    def pause(self, tenant_id: str | None, target: str) -> None:
        tenant_id, target = _checked(tenant_id, target)
        scope = tenant_id or _EVERYWHERE
        with self._file.write() as db:
            exists = db.execute("SELECT 1 FROM pauses WHERE scope = ? AND target = ?", (scope, target)).fetchone()
            if not exists and db.execute("SELECT COUNT(*) FROM pauses").fetchone()[0] >= MAX_PAUSES:
                raise _too_many()
            db.execute("INSERT OR IGNORE INTO pauses (scope, target, paused_at) VALUES (?, ?, ?)",
                       (scope, target, self._clock()))
        self._generation += 1

    def resume(self, tenant_id: str | None, target: str) -> None:
        tenant_id, target = _checked(tenant_id, target)
        with self._file.write() as db:
            db.execute("DELETE FROM pauses WHERE scope = ? AND target = ?", (tenant_id or _EVERYWHERE, target))
        self._generation += 1

    def is_paused(self, tenant_id: str, target: str) -> bool:
        pauses = self._current()
        return (tenant_id, target) in pauses or (_EVERYWHERE, target) in pauses

    def _current(self) -> frozenset[tuple[str, str]]:
        now, generation = self._monotonic(), self._generation
        cached = self._cache
        if cached is not None and cached[1] == generation and now - cached[0] < self._ttl:
            return cached[2]
        rows = self._file.read("SELECT scope, target FROM pauses LIMIT ?", (MAX_PAUSES,))
        pauses = frozenset((scope, target) for scope, target in rows)
        self._cache = (now, generation, pauses)
        return pauses

    def paused(self) -> list[Pause]:
        rows = self._file.read("SELECT scope, target, paused_at FROM pauses LIMIT ?", (MAX_PAUSES,))
        return _ordered([Pause(None if scope == _EVERYWHERE else scope, target, at) for scope, target, at in rows])

    def close(self) -> None:
        self._file.close()
