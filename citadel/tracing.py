"""A span per stage, as OpenTelemetry spans (DESIGN.md §4 step 8).

Each stage of a request is one span of one trace whose trace id is the request's id (a uuid4 hex is
128 bits, a trace id's size; any other id is hashed to one), so the stages a request went through in
every process — gateway, retriever shards, generator, across Ray Serve hops that pass the request id
along — fall into one trace without a propagation header. A stage that returns chunks names their
ids (`citadel.chunk_ids`), so a wrong answer can be traced back to the passage that caused it.

Where spans go (`tracing` config, `configure_tracing`):
- `log` (default): one JSON line per span on the `citadel.trace` logger, for the operator's log pipeline;
- `console`: OpenTelemetry's console exporter; `file`: JSON lines appended to `tracing.file`;
- `otlp`: OTLP over HTTP to `tracing.otlp_endpoint` (the package opentelemetry-exporter-otlp-proto-http).
This process's own TracerProvider is used, never the global one, so a host's (Ray's) tracing is
left as it is.

A span never carries a user's sensitive text: spans outlive the request like the answer log does,
so every text field is bounded, any that holds a card number or a secret is redacted
(citadel/guardrails/redaction.py), and personal data in the rest is masked ("[email]", "[phone]":
citadel/guardrails/personal.py, with the known user names once the wiring sets its masker), whoever
passed it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
import time
from pathlib import Path
from typing import Sequence

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor,
                                            SpanExporter, SpanExportResult)
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from citadel.guardrails.personal import PATTERNS_ONLY, PersonalDataMasker
from citadel.guardrails.redaction import redacted_text

TRACE_LOGGER = "citadel.trace"
log = logging.getLogger(TRACE_LOGGER)
# Longest text a span field keeps (ids and reasons are short; a span is not a place for content).
MAX_FIELD_CHARS = 256
# The part of a text field that is screened: a value this long is cut to MAX_FIELD_CHARS anyway.
MASK_WINDOW_CHARS = 4 * MAX_FIELD_CHARS
# At most this many chunk ids on one span (a stage returns tens; a span is not a result set).
MAX_CHUNK_IDS = 200
ATTRIBUTE_PREFIX = "citadel."
NS_PER_MS = 1_000_000
EXPORTERS = ("log", "console", "file", "otlp")


# ---------------------------------------------------------------------- exporters
def span_record(span: ReadableSpan) -> dict:
    """A finished span as one flat JSON-able record: ids, stage, duration, its attributes."""
    attributes = dict(span.attributes or {})
    record = {"ts": round((span.end_time or 0) / 1e9, 6), "trace_id": f"{span.context.trace_id:032x}",
              "span_id": f"{span.context.span_id:016x}", "stage": span.name,
              "duration_ms": round(((span.end_time or 0) - (span.start_time or 0)) / NS_PER_MS, 3)}
    for key, value in attributes.items():
        record[key.removeprefix(ATTRIBUTE_PREFIX)] = list(value) if isinstance(value, tuple) else value
    return record


class LogSpanExporter(SpanExporter):
    """Spans as JSON lines on the `citadel.trace` logger."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if log.isEnabledFor(logging.INFO):
            for span in spans:
                log.info(json.dumps(span_record(span), sort_keys=True, default=str))
        return SpanExportResult.SUCCESS


class FileSpanExporter(SpanExporter):
    """Spans as JSON lines appended to a file (one write per span, under a lock)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(s), sort_keys=True, default=str) + "\n" for s in spans)
        try:
            with self._lock:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as out:
                    out.write(lines)
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS


def make_exporter(kind: str, file: Path | None = None, otlp_endpoint: str | None = None) -> SpanExporter:
    if kind == "log":
        return LogSpanExporter()
    if kind == "console":
        return ConsoleSpanExporter()
    if kind == "file":
        if file is None:
            raise ValueError("tracing.exporter 'file' needs tracing.file")
        return FileSpanExporter(file)
    if kind == "otlp":
        if not otlp_endpoint:
            raise ValueError("tracing.exporter 'otlp' needs tracing.otlp_endpoint")
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ValueError("tracing.exporter 'otlp' needs the package opentelemetry-exporter-otlp-proto-http") \
                from None
        return OTLPSpanExporter(endpoint=otlp_endpoint)
    raise ValueError(f"tracing.exporter is one of {EXPORTERS}, not {kind!r}")


# ---------------------------------------------------------------------- this process's tracer
_lock = threading.Lock()
_provider: TracerProvider | None = None
# What masks personal data in span fields: the patterns until the wiring sets one with known names.
_masker: PersonalDataMasker = PATTERNS_ONLY


def set_span_masker(masker: PersonalDataMasker) -> None:
    """Mask span fields with `masker` from now on (the wiring's, which knows the catalog's users)."""
    global _masker
    _masker = masker
    _screened.cache_clear()


def configure_tracing(kind: str = "log", file: Path | None = None, otlp_endpoint: str | None = None,
                      exporter: SpanExporter | None = None) -> TracerProvider:
    """This process's tracer provider, exporting as told (an `exporter` given directly wins: tests).
    Replaces the one before, whose spans are flushed first."""
    global _provider
    chosen = exporter or make_exporter(kind, file, otlp_endpoint)
    provider = TracerProvider(resource=Resource.create({"service.name": "citadel"}))
    # A remote collector gets batches off the request's thread; a log or file line is written at once.
    batched = kind == "otlp" and exporter is None
    provider.add_span_processor(BatchSpanProcessor(chosen) if batched else SimpleSpanProcessor(chosen))
    with _lock:
        old, _provider = _provider, provider
    if old is not None:
        old.shutdown()
    return provider


def configure_from_config(config) -> None:
    """Set up tracing as `config.tracing` says (once per process per setting)."""
    settings = config.tracing
    file = settings.file or (config.home / "traces.jsonl")
    key = (settings.exporter, str(file) if settings.exporter == "file" else "", settings.otlp_endpoint or "")
    if getattr(configure_from_config, "_key", None) == key:
        return
    configure_tracing(settings.exporter, file, settings.otlp_endpoint)
    configure_from_config._key = key


def _tracer() -> trace.Tracer:
    global _provider
    if _provider is None:
        with _lock:
            if _provider is None:
                provider = TracerProvider(resource=Resource.create({"service.name": "citadel"}))
                provider.add_span_processor(SimpleSpanProcessor(LogSpanExporter()))
                _provider = provider
    return _provider.get_tracer("citadel")


def trace_id_of(request_id: str) -> int:
    """The trace id a request's spans share: the id itself when it is 32 hex digits (a uuid4 hex),
    else the first 128 bits of its SHA-256."""
    text = str(request_id)
    if len(text) == 32:
        try:
            value = int(text, 16)
            if value:
                return value
        except ValueError:
            pass
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:16], "big") or 1


def _parent(request_id: str) -> trace.Context:
    trace_id = trace_id_of(request_id)
    span_id = (trace_id & ((1 << 64) - 1)) or 1  # a stable remote parent: the request itself
    context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(context))


# ---------------------------------------------------------------------- emitting
def emit_span(request_id: str, stage: str, duration_ms: float, chunk_ids: list[str] | None = None,
              end_ns: int | None = None, **fields) -> dict:
    """One finished stage as a span of the request's trace, ending at `end_ns` (default now) and
    lasting `duration_ms`. Returns what it carries (ids, stage, duration, fields), as its exported
    record shows it."""
    end_ns = time.time_ns() if end_ns is None else end_ns
    duration_ns = _duration_ns(duration_ms)
    attributes: dict = {f"{ATTRIBUTE_PREFIX}request_id": _safe(str(request_id))}
    if chunk_ids is not None:
        attributes[f"{ATTRIBUTE_PREFIX}chunk_ids"] = [str(c) for c in list(chunk_ids)[:MAX_CHUNK_IDS]]
    for name, value in fields.items():
        if value is not None:
            attributes[f"{ATTRIBUTE_PREFIX}{name}"] = _attribute(value)
    span = _tracer().start_span(stage, context=_parent(request_id), start_time=end_ns - duration_ns,
                                attributes=attributes)
    span.end(end_time=end_ns)
    record = {"ts": round(end_ns / 1e9, 6), "request_id": attributes[f"{ATTRIBUTE_PREFIX}request_id"],
              "stage": stage, "duration_ms": round(duration_ns / NS_PER_MS, 3),
              "trace_id": f"{trace_id_of(request_id):032x}"}
    record.update({k.removeprefix(ATTRIBUTE_PREFIX): v for k, v in attributes.items()})
    return record


def emit_stage_spans(request_id: str, timings_ms: dict[str, float], chunks_by_stage: dict[str, list[str]],
                     **fields) -> list[dict]:
    """One span per timed stage; `chunks_by_stage` attaches the chunk ids a stage returned, `fields`
    go on every span (a correlation id). The stages ran one after another in the order `timings_ms`
    holds them and are emitted after the last one: they are laid back to back, the last ending now,
    so a trace viewer shows them in sequence rather than all ending at once."""
    stages = [(stage.removesuffix("_ms"), ms) for stage, ms in timings_ms.items() if stage != "total"]
    end_ns = time.time_ns() - sum(_duration_ns(ms) for _, ms in stages)  # where the first stage began
    records = []
    for stage, ms in stages:
        end_ns += _duration_ns(ms)
        records.append(emit_span(request_id, stage, ms, chunks_by_stage.get(stage), end_ns=end_ns, **fields))
    return records


def _duration_ns(duration_ms: float) -> int:
    return max(0, int(float(duration_ms) * NS_PER_MS))


def _safe(value):
    """A field as a span may carry it: text bounded, redacted when it holds sensitive data, personal
    data masked. Cut to a few times the field's size before masking (a bounded cost), and to the
    field's size after it (so no cut leaves half an address unmasked)."""
    if isinstance(value, str):
        return _screened(value[:MASK_WINDOW_CHARS])
    return value


@functools.lru_cache(maxsize=2048)
def _screened(text: str) -> str:
    """A span field's text redacted and masked, remembered: each stage's span carries the same fields
    (the question, the tenant), and the same chunk ids come back request after request. The masker
    holds no state that changes, so a remembered result stays right until another masker is set."""
    return _masker.mask(redacted_text(text))[:MAX_FIELD_CHARS]


def _attribute(value):
    """An OpenTelemetry attribute value: text (bounded, redacted), a number, a bool, or a list of text."""
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [_safe(str(v)) for v in list(value)[:MAX_CHUNK_IDS]]
    return _safe(str(value))
