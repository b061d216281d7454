"""A span per stage, logged as one JSON line with the request id (DESIGN.md §4 step 8).

Spans go to the `citadel.trace` logger; an operator routes it to their log pipeline. Each span names
the chunk ids the stage returned where the stage returns chunks, so a wrong answer can be traced
back to the passage that caused it.

A span never carries a user's sensitive text: spans outlive the request like the answer log does,
so every text field is bounded and any that holds a card number or a secret is redacted
(citadel/guardrails/redaction.py), whoever passed it.
"""

from __future__ import annotations

import json
import logging
import time

from citadel.guardrails.redaction import redacted_text

TRACE_LOGGER = "citadel.trace"
log = logging.getLogger(TRACE_LOGGER)
# Longest text a span field keeps (ids and reasons are short; a span is not a place for content).
MAX_FIELD_CHARS = 256


def emit_span(request_id: str, stage: str, duration_ms: float, chunk_ids: list[str] | None = None,
              **fields) -> dict:
    span = {"ts": round(time.time(), 6), "request_id": request_id, "stage": stage,
            "duration_ms": round(float(duration_ms), 3)}
    if chunk_ids is not None:
        span["chunk_ids"] = list(chunk_ids)
    span.update({name: _safe(value) for name, value in fields.items() if value is not None})
    if log.isEnabledFor(logging.INFO):
        log.info(json.dumps(span, sort_keys=True, default=str))
    return span


def emit_stage_spans(request_id: str, timings_ms: dict[str, float], chunks_by_stage: dict[str, list[str]],
                     **fields) -> list[dict]:
    """One span per timed stage; `chunks_by_stage` attaches the chunk ids a stage returned, `fields`
    go on every span (a correlation id)."""
    return [emit_span(request_id, stage.removesuffix("_ms"), ms, chunks_by_stage.get(stage.removesuffix("_ms")),
                      **fields)
            for stage, ms in timings_ms.items() if stage != "total"]


def _safe(value):
    """A field as a span may carry it: text bounded, and redacted when it holds sensitive data."""
    if isinstance(value, str):
        return redacted_text(value)[:MAX_FIELD_CHARS]
    return value
