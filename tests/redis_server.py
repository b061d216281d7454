"""A private redis-server for the tests that need a real one (state conformance, the Serve app).

CI installs the Debian package; CITADEL_REQUIRE_REDIS=1 makes its absence a failure instead of a skip.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.required import missing
import redis

REDIS_START_TIMEOUT_S = 10.0
REDIS_POLL_S = 0.05
REDIS_STOP_TIMEOUT_S = 5.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_ping(proc: subprocess.Popen, url: str, log: Path) -> None:
    client = redis.Redis.from_url(url, socket_timeout=REDIS_POLL_S * 10, socket_connect_timeout=REDIS_POLL_S * 10)
    deadline = time.monotonic() + REDIS_START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"redis-server exited with {proc.returncode}:\n{log.read_text()}")
            try:
                if client.ping():
                    return
            except redis.exceptions.ConnectionError:
                time.sleep(REDIS_POLL_S)
        pytest.fail(f"redis-server did not answer PING within {REDIS_START_TIMEOUT_S} s:\n{log.read_text()}")
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    """A private redis-server on a free localhost port, without persistence; always stopped afterwards."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing("REDIS", "redis-server is not on PATH (install the Debian package `redis-server`)",
                "the Redis half of the state conformance suite is skipped")
    workdir = tmp_path_factory.mktemp("redis")
    port = _free_port()
    log = workdir / "redis.log"
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    args += ["--dir", str(workdir)]
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        url = f"redis://127.0.0.1:{port}/0"
        _wait_for_ping(proc, url, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=REDIS_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


