"""An ASGI app (the gateway) served for real by uvicorn on a thread, on a free port of 127.0.0.1: what
the browser, load and drill tests send HTTP to."""

from __future__ import annotations

import socket
import threading
import time

import pytest

SERVER_START_TIMEOUT_S = 20.0
SERVER_STOP_TIMEOUT_S = 10.0


class LiveServer:
    """An ASGI app served by uvicorn on a thread, on a free port of 127.0.0.1."""

    def __init__(self, app, lifespan: str = "off"):
        """`lifespan`: uvicorn's setting; "on" runs the app's lifespan (the MCP server's session manager)."""
        import uvicorn

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan=lifespan))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="live-gateway", daemon=True)

    def start(self) -> "LiveServer":
        self._thread.start()
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the gateway did not start on {self.url} within {SERVER_START_TIMEOUT_S} s")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(SERVER_STOP_TIMEOUT_S)
        self._sock.close()

    def __enter__(self) -> "LiveServer":
        return self.start()

    def __exit__(self, *_) -> None:
        self.stop()
