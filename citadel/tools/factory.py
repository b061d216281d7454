"""The approval store a deployment is built with, chosen from config: SQLite (the file every process
of the machine shares) or in process. The contract and its in-process reference are approvals.py;
the SQLite backend approvals_sqlite.py; only this module knows both."""

from __future__ import annotations

import time

from citadel.config import CitadelConfig
from citadel.tools.approvals import APPROVALS_FILE, ApprovalStore, Clock, MemoryApprovalStore
from citadel.tools.approvals_sqlite import SQLiteApprovalStore


def make_approval_store(config: CitadelConfig, clock: Clock | None = None, backend: str | None = None) -> ApprovalStore:
    """The approval store this machine's processes share: SQLite at `config.home / APPROVALS_FILE`
    ("approvals.sqlite", beside runs.sqlite; the path is computed here, config.py names none); in
    process only when `backend="memory"` is asked for (tests, one process). Approvals escalate and
    expire by `clock` (default: time.time). The SQLite file is opened, and its schema created, here."""
    now = clock or time.time
    chosen = backend or "sqlite"
    if chosen == "memory":
        return MemoryApprovalStore(now)
    if chosen == "sqlite":
        return SQLiteApprovalStore(config.home / APPROVALS_FILE, now)
    raise ValueError(f"unknown approval store backend {backend!r} (memory or sqlite)")
