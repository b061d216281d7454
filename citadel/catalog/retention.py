"""Answer-log retention: rows older than `answer.answer_log_retention_days` are deleted.

Enforced by a purge job, not only on the request path (where AnswerService also purges, at most
hourly): `citadel purge-logs` for a cron job or a Kubernetes CronJob, and a background thread in every
serving process (`answer.answer_log_purge_interval_s`), so an idle deployment forgets on time too.
The purge is the answer log's only deleter (the table refuses updates). The prompts kept encrypted for
investigation (citadel/guardrails/prompt_vault.py) go by the same purge, after
`answer.prompt_retention_days`.
"""

from __future__ import annotations

import logging
import threading

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


class AnswerLogPurger:
    """A daemon thread that purges expired answer-log rows every `interval_s` (first one at start)."""

    def __init__(self, catalog, config, interval_s: float):
        self._catalog = catalog
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
            self._stop.wait(self._interval_s)
