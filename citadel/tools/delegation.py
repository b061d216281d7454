"""What a run holds so its tools can act for its user hours later (DESIGN.md §10).

A run may park for an approval or a review for a day or a week; the user's own context expires in
minutes and is bound to the app that signed it. So when the run starts, while that context is fresh,
Citadel exchanges it at the users' token service (citadel/tools/token_exchange.py) for one
**delegation** per system the tools reach: bound to the run, that system and its tools, expiring
when the longest approval or review the run could wait for has expired. Each tool call then
exchanges the delegation for a five-minute access token. The token service checks the user on every
exchange, so a user who lost access while the run waited gets no token and no write.

The delegations live in `<home>/secrets/delegations.sqlite` (every process of the home sees them; a
run adopted by another replica finds its own). A delegation is useless without Citadel's client
credential, and it names one run; expired rows are purged as new ones are written.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from citadel.config import CitadelConfig
from citadel.errors import CitadelError
from citadel.identity.base import ensure_secret_dir
from citadel.tools.spec import ToolSpec
from citadel.tools.token_exchange import TokenExchangeClient
from citadel.types import Principal

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS delegations (
    run_id TEXT NOT NULL,
    audience TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    scopes TEXT NOT NULL,
    token TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (run_id, audience)
);
CREATE INDEX IF NOT EXISTS delegations_by_user ON delegations (tenant_id, user_id, audience, expires_at);
"""
BUSY_TIMEOUT_MS = 5_000


@dataclass(frozen=True)
class Delegation:
    run_id: str
    audience: str
    tenant_id: str
    user_id: str
    scopes: tuple[str, ...]
    token: str
    expires_at: float

    def acts_for(self, principal: Principal) -> bool:
        return (self.tenant_id, self.user_id) == (principal.tenant_id, principal.user_id)


def delegations_path(config: CitadelConfig) -> Path:
    return Path(config.secrets_dir) / "delegations.sqlite"


class DelegationStore:
    def __init__(self, path: Path, clock: Callable[[], float] = time.time):
        ensure_secret_dir(path.parent)
        self._clock = clock
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        with self._lock:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.executescript(SCHEMA)

    def put(self, delegation: Delegation) -> None:
        with self._lock:
            self._db.execute("DELETE FROM delegations WHERE expires_at <= ?", (self._clock(),))
            self._db.execute("INSERT OR REPLACE INTO delegations VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (delegation.run_id, delegation.audience, delegation.tenant_id, delegation.user_id,
                              " ".join(delegation.scopes), delegation.token, delegation.expires_at))

    def for_run(self, run_id: str, audience: str) -> Delegation | None:
        """The run's live delegation for that system."""
        return self._one("SELECT * FROM delegations WHERE run_id = ? AND audience = ? AND expires_at > ?",
                         (run_id, audience, self._clock()))

    def newest_for_user(self, principal: Principal, audience: str, scope: str) -> Delegation | None:
        """The user's newest live delegation covering `scope` on that system: for a read made outside
        a step (the record a reviewer sees beside a proposal), which names no run."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM delegations WHERE tenant_id = ? AND user_id = ? AND audience = ?"
                                    " AND expires_at > ? ORDER BY expires_at DESC",
                                    (principal.tenant_id, principal.user_id, audience, self._clock())).fetchall()
        return next((d for d in map(_delegation, rows) if scope in d.scopes), None)

    def _one(self, query: str, params: tuple) -> Delegation | None:
        with self._lock:
            row = self._db.execute(query, params).fetchone()
        return _delegation(row) if row else None


def _delegation(row: tuple) -> Delegation:
    run_id, audience, tenant_id, user_id, scopes, token, expires_at = row
    return Delegation(run_id, audience, tenant_id, user_id, tuple(scopes.split()), token, expires_at)


def grants_of(specs: Iterable[ToolSpec]) -> dict[str, list[str]]:
    """The tools each system's delegation covers: every registered tool bound to that system."""
    grants: dict[str, list[str]] = defaultdict(list)
    for spec in specs:
        if spec.http is not None:
            grants[spec.http.endpoint].append(spec.name)
    return {audience: sorted(names) for audience, names in grants.items()}


def delegation_lifetime_s(config: CitadelConfig, specs: Iterable[ToolSpec]) -> int:
    """As long as the run may wait: the longest approval expiry of its tools (or a review's), the run's
    own deadline before it parks and after it resumes, and a margin."""
    waits = [float(s.expire_after_s) for s in specs if s.expire_after_s] + [config.tools.review_expire_after_s]
    return int(max(waits) + 2 * config.agent.deadline_s + config.tools.delegation_margin_s)


class RunDelegator:
    """At a run's start: the user's context → one delegation per system, stored for the run."""

    def __init__(self, client: TokenExchangeClient, store: DelegationStore, grants: dict[str, list[str]],
                 lifetime_s: int):
        self.client, self.store, self.grants, self.lifetime_s = client, store, grants, lifetime_s

    def start_run(self, run_id: str, principal: Principal, subject_token: str | None) -> None:
        """Never raises: a run whose delegation could not be had still answers; its tool calls are
        then refused (`delegation_refused`) and it says so."""
        if not subject_token:
            log.warning("run %s: no user context to delegate from; its tools will be refused", run_id)
            return
        for audience, tools in self.grants.items():
            try:
                issued = self.client.delegate(subject_token, run_id, audience, tools, self.lifetime_s)
            except CitadelError as error:
                log.warning("run %s: no delegation for %s (%s)", run_id, audience, error.code)
                continue
            self.store.put(Delegation(run_id, audience, principal.tenant_id, principal.user_id, issued.scopes,
                                      issued.token, issued.expires_at))
