"""OpenTelemetry spans: a trace of one answer holds every stage as a span, all of
the request's trace (the request id is the trace id), the stages that return chunks naming them."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citadel import tracing
from tests.integration.conftest import make_home
from tests.integration.test_api import client_for


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    yield exporter
    tracing.configure_tracing("log")  # the default again for the tests after this one


def test_one_answer_is_one_trace_with_a_span_per_stage_and_its_chunk_ids(tmp_path, spans):
    home = make_home(tmp_path / "home")
    with client_for(home) as client:
        tracing.configure_tracing(exporter=spans)  # after the wiring set up its own
        body = client.post("/v1/answer", json={"question": "What is the hotel limit per night in London?"},
                           headers=home.headers()).json()
    assert not body["refused"], body
    trace_id = int(body["request_id"], 16)
    mine = [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id]
    stages = {s.name for s in mine}
    assert {"embed", "search", "live_check", "gate", "expand", "generate", "validate"} <= stages, stages
    by_stage = {s.name: s for s in mine}
    assert all(s.parent is not None and s.parent.trace_id == trace_id for s in mine)
    recheck = list(by_stage["live_check"].attributes["citadel.chunk_ids"])
    assert recheck and {c["chunk_id"] for c in body["citations"]} <= set(recheck)
    # Every stage that hands chunks on names them: what the search found, what the prompt held (the
    # expansion may add a neighbour the search did not return), what the answer cites.
    found = list(by_stage["search"].attributes["citadel.chunk_ids"])
    prompted = list(by_stage["generate"].attributes["citadel.chunk_ids"])
    cited = list(by_stage["validate"].attributes["citadel.chunk_ids"])
    assert found and prompted and cited == [c["chunk_id"] for c in body["citations"]]
    assert set(cited) <= set(prompted)
    if "rerank" in by_stage:
        assert set(by_stage["rerank"].attributes["citadel.chunk_ids"]) <= set(found)
    assert by_stage["generate"].end_time >= by_stage["generate"].start_time


def test_spans_go_to_a_file_as_json_lines_and_an_unknown_exporter_is_refused(tmp_path):
    path = tmp_path / "traces.jsonl"
    try:
        tracing.configure_tracing("file", path)
        tracing.emit_span("0123456789abcdef0123456789abcdef", "retrieve", 12.5, ["acme:doc:v1:0000"], hit=False)
    finally:
        tracing.configure_tracing("log")
    [line] = path.read_text().splitlines()
    record = json.loads(line)
    assert record["trace_id"] == "0123456789abcdef0123456789abcdef" and record["stage"] == "retrieve"
    assert record["chunk_ids"] == ["acme:doc:v1:0000"] and record["duration_ms"] == 12.5
    with pytest.raises(ValueError, match="one of"):
        tracing.make_exporter("zipkin")
    with pytest.raises(ValueError, match="otlp_endpoint"):
        tracing.make_exporter("otlp")


def test_a_requests_stage_spans_follow_one_another_as_the_stages_ran(spans):
    """The stages are timed as they run and emitted together at the end: laid back to back, ending
    now, a trace viewer shows them in order rather than all ending at the same instant."""
    import time

    tracing.configure_tracing(exporter=spans)
    before = time.time_ns()
    tracing.emit_stage_spans("0123456789abcdef0123456789abcdef",
                             {"route": 5.0, "embed": 20.0, "search": 10.0, "generate": 30.0, "total": 70.0}, {})
    after = time.time_ns()
    emitted = {s.name: s for s in spans.get_finished_spans()}
    assert list(emitted) == ["route", "embed", "search", "generate"]  # "total" is no stage
    order = [emitted[name] for name in ("route", "embed", "search", "generate")]
    for earlier, later in zip(order, order[1:]):
        assert earlier.end_time == later.start_time
    assert before <= order[-1].end_time <= after
    assert [round((s.end_time - s.start_time) / 1e6, 3) for s in order] == [5.0, 20.0, 10.0, 30.0]
