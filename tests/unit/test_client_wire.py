"""citadel.client's reading of the wire, without a server: Server-Sent Events as the runs route sends
them (comments, multi-line data, an event cut off by a drop), error bodies that are not the API's
JSON, and which failures may be sent again."""

from __future__ import annotations

import json

import httpx

from citadel.client.errors import BudgetExhausted, NotFound, Overloaded, ServerError, Unavailable, api_error
from citadel.client.routes import answer, run, upload_document
from citadel.client.transport import EventCursor, EventReader, Retries


def _events(lines: list[str]) -> list:
    reader = EventReader()
    return [e for e in (reader.feed(line) for line in lines) if e is not None]


def test_events_are_read_from_data_lines_and_comments_are_skipped():
    body = json.dumps({"seq": 1, "type": "progress", "data": {"stage": "started"}})
    lines = [": keep-alive", "", "id: 1", "event: progress", f"data: {body}", "", ": keep-alive", ""]
    [event] = _events(lines)
    assert (event.seq, event.type, event.data) == (1, "progress", {"stage": "started"}) and not event.terminal
    split = '{"seq": 2, "type": "final",\n"data": {}}'.split("\n")
    [final] = _events(["id: 2", *[f"data: {part}" for part in split], ""])
    assert final.seq == 2 and final.terminal


def test_an_event_cut_off_before_its_blank_line_is_never_delivered():
    assert _events(["id: 3", 'data: {"seq": 3, "type": "token", "data": {}}']) == []


def test_the_cursor_delivers_each_seq_once_and_resumes_after_the_last():
    cursor = EventCursor(2, until=("approval_required",))
    assert cursor.headers()["last-event-id"] == "2"
    seqs = [1, 2, 3, 3, 4]
    delivered = [s for s in seqs if cursor.take(_events([f'data: {{"seq": {s}, "type": "token", "data": {{}}}}', ""])[0])]
    assert delivered == [3, 4] and cursor.after_seq == 4
    assert "last-event-id" not in EventCursor(0, ()).headers()


def test_error_bodies_map_by_code_then_status_and_a_proxy_page_still_maps():
    def body(code):
        return json.dumps({"error": {"code": code, "message": "m", "request_id": "r"}}).encode()

    assert isinstance(api_error(503, body("overloaded"), {"retry-after": "2"}), Overloaded)
    assert type(api_error(503, body("permissions_unavailable"), {})) is Unavailable
    refused = api_error(429, body("budget_exhausted"), {"retry-after": "3600"})
    assert isinstance(refused, BudgetExhausted) and refused.retry_after_s == 3600 and refused.request_id == "r"
    assert isinstance(api_error(404, body("not_found"), {}), NotFound)
    proxy = api_error(502, b"<html>bad gateway</html>", {"x-request-id": "p"})
    assert isinstance(proxy, ServerError) and proxy.code == "http_502" and proxy.request_id == "p"


def test_only_what_cannot_run_twice_is_sent_again():
    retries = Retries(backoff_s=0.01)
    unavailable = api_error(503, b'{"error": {"code": "unavailable", "message": "", "request_id": ""}}', {})
    overloaded = api_error(503, b'{"error": {"code": "overloaded", "message": "", "request_id": ""}}',
                           {"retry-after": "1"})
    assert retries.resend_after(run("r"), unavailable, 1) is not None
    assert retries.resend_after(answer("q"), unavailable, 1) is None
    assert retries.resend_after(answer("q"), overloaded, 1) == 1.0
    assert retries.resend_after(answer("q"), httpx.ConnectError("refused"), 1) is not None
    assert retries.resend_after(answer("q"), httpx.ReadError("reset"), 1) is None
    upload = upload_document("acme", "d", "d.md", "text", None, [], {}, None)
    assert upload.headers["idempotency-key"] and retries.resend_after(upload, httpx.ReadError("reset"), 1) is not None
    assert retries.resend_after(run("r"), unavailable, retries.max_attempts) is None
    too_long = api_error(503, b'{"error": {"code": "overloaded", "message": "", "request_id": ""}}',
                         {"retry-after": "3600"})
    assert retries.resend_after(run("r"), too_long, 1) is None
