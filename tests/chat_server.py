"""A real chat-completions HTTP server on 127.0.0.1 for tests of the OpenAI-compatible backends
(generator, planner): each POST is recorded and answered by a function of its JSON body.

    with ChatServer(lambda body: (200, completion("text"))) as server:
        ... server.url ..., server.requests
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

Reply = Callable[[dict], "tuple[int, dict]"]


def completion(content: str, usage: dict | None = None) -> dict:
    """A chat.completion body whose one choice says `content`."""
    payload = {"id": "x", "object": "chat.completion",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop"}]}
    if usage is not None:
        payload["usage"] = usage
    return payload


class ChatServer:
    def __init__(self, reply: Reply, delay_s: float = 0.0):
        self.requests: list[dict] = []
        self._reply = reply
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append({"path": self.path, "body": body,
                                            "authorization": self.headers.get("Authorization")})
                    status, payload = server._reply(body)
                time.sleep(delay_s)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep test output quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "ChatServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


def scripted(*replies) -> Reply:
    """Replies in order: a content string (a 200 completion) or (status, body); then 500."""
    queue = list(replies)

    def reply(_body: dict) -> tuple[int, dict]:
        item = queue.pop(0) if queue else (500, {"error": "script exhausted"})
        return item if isinstance(item, tuple) else (200, completion(item))

    return reply
