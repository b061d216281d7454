"""loadtests/: the percentile the reports use, `drive` against a tiny local HTTP server (loopback,
stopped by the test), and the room's rule that it imports no project package (DESIGN.md §2)."""

from __future__ import annotations

import ast
import asyncio
import json
import socket
import statistics
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from loadtests.client import NO_RESPONSE, LoadRun, drive, percentile

LOADTESTS = Path(__file__).resolve().parents[2] / "loadtests"
PROJECT_PACKAGES = {"citadel", "serving", "indexing", "capacity", "cluster", "benchmarks"}


# ---------------------------------------------------------------------- percentile
def test_percentile_empty_single_and_interpolated():
    assert percentile([], 50) == 0.0
    assert percentile([7.0], 99) == 7.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(list(reversed(values)), 95) == pytest.approx(95.05)  # order of the input does not matter
    assert percentile(values, 99) == statistics.quantiles(values, n=100, method="inclusive")[98]


# ---------------------------------------------------------------------- drive
class _Handler(BaseHTTPRequestHandler):
    """Echoes the JSON body and the authorization header; a body asking for `fail` gets a 503."""

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        status = 503 if body.get("fail") else 200
        payload = json.dumps({"echo": body, "authorization": self.headers.get("authorization")}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:  # keep the test output quiet
        pass


@pytest.fixture
def server_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_drive_sends_each_workers_headers_and_records_completions(server_url):
    seen_tenants: list = []

    def headers_for(worker: int, tenant):
        seen_tenants.append(tenant)
        return {"authorization": f"Bearer worker-{worker}"}

    run = LoadRun()
    done = asyncio.run(drive(server_url, headers_for, run, "/v1/answer", lambda turn: {"turn": turn, "fail": turn % 2},
                             concurrency=2, duration_s=0.3, keep_bodies=True, tenant="acme"))
    assert seen_tenants == ["acme", "acme"]  # once per worker, with the tenant passed through
    assert done and done == run.completions
    assert {c.status for c in done} == {200, 503}  # odd turns fail
    assert {c.body["authorization"] for c in done} == {"Bearer worker-0", "Bearer worker-1"}
    assert all(c.latency_ms > 0 and 0 <= c.t_s <= run.since() for c in done)


def _closed_port_url() -> str:
    """A loopback port that was just free and is closed again: nothing listens there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_drive_appends_to_a_run_and_counts_refused_connections(server_url):
    run = LoadRun()
    asyncio.run(drive(server_url, lambda w, t: {}, run, "/x", lambda turn: {}, 1, 0.1))
    first = len(run.completions)
    dead = asyncio.run(drive(_closed_port_url(), lambda w, t: {}, run, "/x", lambda turn: {}, 1, 0.1,
                             timeout_s=1.0))
    assert first > 0 and dead and run.completions[first:] == dead
    assert {c.status for c in dead} == {NO_RESPONSE} and all(c.body is None for c in dead)


def test_drive_spreads_workers_over_several_urls(server_url):
    """Worker i keeps to URL i mod n: with a live URL and a closed one, one worker's requests are all
    answered and the other's all refused."""
    run = LoadRun()
    done = asyncio.run(drive([server_url, _closed_port_url()], lambda w, t: {"authorization": f"w{w}"}, run, "/v1/answer",
                             lambda turn: {"turn": turn, "fail": 0}, 2, 0.3, keep_bodies=True, timeout_s=1.0))
    answered = [c for c in done if c.status == 200]
    assert answered and {c.body["authorization"] for c in answered} == {"w0"}
    assert {c.status for c in done} == {200, NO_RESPONSE}


# ---------------------------------------------------------------------- the room's rule
def _imported_roots(tree: ast.AST) -> set[str]:
    roots = set()
    for node in ast.walk(tree):  # every import, top-level or lazy inside a function
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_loadtests_imports_no_project_package():
    modules = sorted(LOADTESTS.rglob("*.py"))
    assert modules, f"no modules under {LOADTESTS}"
    offenders = {str(path.relative_to(LOADTESTS)): _imported_roots(ast.parse(path.read_text())) & PROJECT_PACKAGES
                 for path in modules}
    assert {path: roots for path, roots in offenders.items() if roots} == {}
