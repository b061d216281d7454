"""Log lines without personal data: a `logging.Filter` that masks each record before a handler writes it.

A logger's own filter sees only the records logged on that very logger, not those of its children
(`citadel.answer.service` passing through `citadel`), so the filter goes on the handlers: the root
logger's (where every Citadel logger's records end up), and Python's last-resort handler (what
prints when nothing is configured). The serving processes and the CLI install it at start
(`install_log_masking`); installing again replaces the filter, so a process holds one masker.
"""

from __future__ import annotations

import logging

from citadel.guardrails.personal import PersonalDataMasker

_FORMATTER = logging.Formatter()


class PersonalDataLogFilter(logging.Filter):
    """Masks a record's message (after its arguments are merged in) and its traceback text; never
    drops a record."""

    def __init__(self, masker: PersonalDataMasker):
        super().__init__()
        self.masker = masker

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "personal_data_masked", False):  # several handlers, one masking
            return True
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is the handler's to report, as without the filter
            return True
        masked = self.masker.mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self.masker.mask(_FORMATTER.formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = self.masker.mask(record.exc_text)
        record.personal_data_masked = True
        return True


def install_log_masking(masker: PersonalDataMasker, *loggers: str) -> PersonalDataLogFilter:
    """Put one masking filter on the handlers of the root logger, of `loggers` (names of loggers
    that do not propagate) and on the last-resort handler, replacing any installed before. Log lines
    keep private IP addresses (`for_logs`): the server that failed is what an operator looks for."""
    log_filter = PersonalDataLogFilter(masker.for_logs())
    handlers = [*logging.getLogger().handlers, *(h for name in loggers for h in logging.getLogger(name).handlers)]
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    for handler in handlers:
        for old in [f for f in handler.filters if isinstance(f, PersonalDataLogFilter)]:
            handler.removeFilter(old)
        handler.addFilter(log_filter)
    return log_filter
