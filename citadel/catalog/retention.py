"""Answer-log retention: rows older than `answer.answer_log_retention_days` are deleted.

Enforced by a purge job, not only on the request path (where AnswerService also purges, at most
hourly): `citadel purge-logs` for a cron job or a Kubernetes CronJob, and a background thread in every
serving process (`answer.answer_log_purge_interval_s`), so an idle deployment forgets on time too.
The purge is the answer log's only deleter (the table refuses updates). The prompts kept encrypted for
investigation (citadel/guardrails/prompt_vault.py) go by the same purge, after
`answer.prompt_retention_days`.

Documents go by their retention class (`governance.retention_classes`, the class the catalog states
of their published version): past its days, counted from the effective date (else from publication),
`purge_expired_documents` withdraws them through the withdrawal (citadel/ingest/withdrawal.py), which
deletes every copy of their text; `citadel purge-logs` runs it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

log = logging.getLogger(__name__)

SECONDS_PER_DAY = 86_400.0


def retention_s(config) -> float:
    """The answer log's retention in seconds, from the `answer` config section."""
    return float(config.answer_log_retention_days) * SECONDS_PER_DAY


def purge_expired_answers(catalog, config) -> int:
    """Delete the rows older than the retention; returns how many went."""
    return int(catalog.purge_answers(retention_s(config)))


def purge_expired_prompts(catalog, config) -> int:
    """Delete the kept prompts older than their retention (all of them when it is 0); returns how many."""
    purge = getattr(catalog, "purge_prompts", None)
    if purge is None:  # a catalog without a prompt vault keeps no prompts
        return 0
    return int(purge(float(config.prompt_retention_days) * SECONDS_PER_DAY))


# The actor a retention purge's withdrawals are audited under.
RETENTION_ACTOR = "retention"


def purge_expired_documents(catalog, withdraw: Callable[[str, str, str], Any], governance_config,
                            now: float | None = None) -> list[dict[str, str]]:
    """Withdraw (and so delete) up to `governance.purge_batch` documents past their retention class;
    `withdraw(tenant, document, actor)` is the withdrawal bound to this process's partitions. Returns
    what went; a document whose withdrawal fails is logged and left for the next run."""
    expired = catalog.expired_documents(dict(governance_config.retention_classes),
                                        time.time() if now is None else now, governance_config.purge_batch)
    purged: list[dict[str, str]] = []
    for document in expired:
        try:
            withdraw(document.tenant_id, document.document_id, RETENTION_ACTOR)
        except Exception:  # the rest still go; this one is found again by the next run
            log.exception("retention: withdrawing %s/%s failed", document.tenant_id, document.document_id)
            continue
        purged.append({"tenant_id": document.tenant_id, "document_id": document.document_id,
                       "retention_class": document.retention_class})
    return purged


# Conversations and runs (citadel/state) expire by the same purge, after `agent.retention_days` idle:
# one purge, one loop, whatever it deletes.
def session_retention_s(agent_config) -> float:
    return float(agent_config.retention_days) * SECONDS_PER_DAY


def purge_expired_sessions(runs, conversations, agent_config) -> dict[str, int]:
    """Delete the conversations (with their messages, summaries, memories) and runs (with their
    event logs) idle past the retention; either store may be None. Returns how many of each."""
    max_idle_s = session_retention_s(agent_config)
    return {"conversations": int(conversations.purge_idle(max_idle_s)) if conversations is not None else 0,
            "runs": int(runs.purge_idle(max_idle_s)) if runs is not None else 0}


def purge_expired(catalog, config, runs=None, conversations=None) -> dict[str, int]:
    """Everything with a retention, from the whole config: answer-log rows, idle conversations, idle runs."""
    return {"answers": purge_expired_answers(catalog, config.answer),
            **purge_expired_sessions(runs, conversations, config.agent)}


class AnswerLogPurger:
    """A daemon thread that purges expired answer-log rows every `interval_s` (first one at start),
    and with them the idle sessions when given `sessions` (a callable: purge_expired_sessions bound to
    this process's stores)."""

    def __init__(self, catalog, config, interval_s: float, sessions: Callable[[], dict] | None = None):
        self._catalog = catalog
        self._sessions = sessions
        self._config = config
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="answer-log-purge", daemon=True)

    def start(self) -> "AnswerLogPurger":
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _purge_sessions(self) -> None:
        if self._sessions is None:
            return
        try:  # apart from the answer log's: one store failing does not keep the other from its purge
            purged = self._sessions()
            if any(purged.values()):
                log.info("sessions: purged %s idle past the retention", purged)
        except Exception:
            log.exception("session purge failed")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                purged = purge_expired_answers(self._catalog, self._config)
                if purged:
                    log.info("answer log: purged %d rows older than the retention", purged)
                prompts = purge_expired_prompts(self._catalog, self._config)
                if prompts:
                    log.info("prompt vault: purged %d records older than the retention", prompts)
            except Exception:  # a failed purge is retried at the next interval; the thread lives on
                log.exception("answer-log purge failed")
            self._purge_sessions()
            self._stop.wait(self._interval_s)
