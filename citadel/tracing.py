"""A span per stage, logged as one JSON line with the request id (DESIGN.md §4 step 8).

Spans go to the `citadel.trace` logger; an operator routes it to their log pipeline. Each span names
the chunk ids the stage returned where the stage returns chunks, so a wrong answer can be traced
back to the passage that caused it.
"""

from __future__ import annotations

import json
import logging
import time

TRACE_LOGGER = "citadel.trace"
log = logging.getLogger(TRACE_LOGGER)


def emit_span(request_id: str, stage: str, duration_ms: float, chunk_ids: list[str] | None = None,
              **fields) -> dict:
    span = {"ts": round(time.time(), 6), "request_id": request_id, "stage": stage,
            "duration_ms": round(float(duration_ms), 3)}
    if chunk_ids is not None:
        span["chunk_ids"] = list(chunk_ids)
    span.update(fields)
    if log.isEnabledFor(logging.INFO):
        log.info(json.dumps(span, sort_keys=True, default=str))
    return span


def emit_stage_spans(request_id: str, timings_ms: dict[str, float], chunks_by_stage: dict[str, list[str]]) -> list[dict]:
    """One span per timed stage; `chunks_by_stage` attaches the chunk ids a stage returned."""
    return [emit_span(request_id, stage.removesuffix("_ms"), ms, chunks_by_stage.get(stage.removesuffix("_ms")))
            for stage, ms in timings_ms.items() if stage != "total"]
