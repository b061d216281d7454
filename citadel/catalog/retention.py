"""Answer-log retention: rows older than `answer.answer_log_retention_days` are deleted.

Enforced by a purge job, not only on the request path (where AnswerService also purges, at most
hourly): `citadel purge-logs` for a cron job or a Kubernetes CronJob, and a background thread in every
serving process (`answer.answer_log_purge_interval_s`), so an idle deployment forgets on time too.
The purge is the answer log's only deleter (the table refuses updates).
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
            except Exception:  # a failed purge is retried at the next interval; the thread lives on
                log.exception("answer-log purge failed")
            self._stop.wait(self._interval_s)
