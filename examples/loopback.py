"""Start and stop an example server (the CRM, the token service) as a background process of a Citadel
home, and serve one in the foreground on loopback: what `citadel up`, the demo and the tests use.

A server runs in its own session (a Ctrl-C in the starting terminal does not reach it), writes only
under the home, and listens on 127.0.0.1 only. Its socket is bound before `HOME/run/<name>.url` is
written, so whoever waits for that file learns the real address without racing for a port. `stop`
stops exactly the pid in `HOME/run/<name>.pid`, and only while that pid is still that server (a pid
reused by an unrelated process after a crash is left alone).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]  # examples/ must be importable in the child
LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
LOG_TAIL_CHARS = 2000

# Processes this interpreter started, so stopping one also reaps it (no zombie left behind).
_children: dict[int, subprocess.Popen] = {}


class ServerStartError(RuntimeError):
    """The server did not answer /healthz in time, or exited while starting (the message quotes its log)."""


@dataclass(frozen=True)
class ExampleServer:
    """One example server: its module (`python -m <module>`) and its short name for the run files."""

    name: str
    module: str

    def paths(self, home: Path) -> tuple[Path, Path, Path]:
        run = run_dir(home)
        return run / f"{self.name}.pid", run / f"{self.name}.url", run / f"{self.name}.log"


def run_dir(home: Path) -> Path:
    return home / "run"


# ----------------------------------------------------------------------------- in the server process

def serve(app, home: Path, server: ExampleServer, port: int) -> None:
    """Serve `app` (ASGI) on 127.0.0.1:`port` (0: a free one) until stopped, announcing the URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, port))
    _, url_file, _ = server.paths(home)
    url_file.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(url_file, f"http://{LOOPBACK}:{sock.getsockname()[1]}\n")
    try:
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    finally:
        url_file.unlink(missing_ok=True)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a reader sees the whole URL or no file, never half of it


# ----------------------------------------------------------------------------- in the starting process

def running(home: Path, server: ExampleServer) -> tuple[int, str] | None:
    """(pid, url) of the server already serving this home, if any (so starting twice is harmless)."""
    pid_file, url_file, _ = server.paths(home)
    try:
        pid, url = int(pid_file.read_text()), url_file.read_text().strip()
    except (OSError, ValueError):
        return None
    return (pid, url) if _is_server(pid, server) and _healthy(url) else None


def start(home: Path, server: ExampleServer, port: int = 0, config_path: Path | None = None,
          timeout_s: float = START_TIMEOUT_S) -> tuple[int, str]:
    """Start `python -m <module> --home HOME` and return (pid, url) once /healthz answers."""
    home = home.resolve()
    found = running(home, server)
    if found is not None:
        return found
    stop(home, server)  # a stale pid file from a crashed run: stop what is still ours, clear the files
    pid_file, url_file, log_file = server.paths(home)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", server.module, "--home", str(home), "--port", str(port)]
    if config_path is not None:
        command += ["--config", str(Path(config_path).resolve())]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with open(log_file, "ab") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   env=env, start_new_session=True)
    _children[process.pid] = process
    pid_file.write_text(f"{process.pid}\n")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stop(home, server)
            raise ServerStartError(f"the {server.name} exited with {process.returncode} while starting: "
                                   f"{_log_tail(log_file)}")
        if url_file.exists():
            url = url_file.read_text().strip()
            if _healthy(url):
                return process.pid, url
        time.sleep(0.1)
    stop(home, server)
    raise ServerStartError(f"the {server.name} did not answer /healthz within {timeout_s:.0f}s: {_log_tail(log_file)}")


def stop(home: Path, server: ExampleServer, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM the home's server, SIGKILL it after `timeout_s`; remove its run files. True if one was stopped."""
    pid_file, url_file, _ = server.paths(home.resolve())
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        pid = None
    stopped = False
    if pid is not None and _is_server(pid, server):
        _signal(pid, signal.SIGTERM)  # uvicorn finishes the requests in flight, then exits
        if not _wait_gone(pid, timeout_s):
            _signal(pid, signal.SIGKILL)
            _wait_gone(pid, timeout_s)
        stopped = True
    elif pid is not None:
        _wait_gone(pid, 0)  # reap our own child if it already exited
    pid_file.unlink(missing_ok=True)
    url_file.unlink(missing_ok=True)
    return stopped


def _is_server(pid: int, server: ExampleServer) -> bool:
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and server.module in process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:  # it ended on its own in the meantime
        pass


def _wait_gone(pid: int, timeout_s: float) -> bool:
    """Wait for `pid` to end; our own child is reaped (waitpid), another process is polled."""
    child = _children.get(pid)
    try:
        if child is not None:
            child.wait(timeout_s)
            del _children[pid]
        else:
            psutil.Process(pid).wait(timeout_s)
    except (subprocess.TimeoutExpired, psutil.TimeoutExpired):
        return False
    except psutil.NoSuchProcess:
        pass
    return True


def _log_tail(log_file: Path) -> str:
    try:
        return log_file.read_text(errors="replace")[-LOG_TAIL_CHARS:].strip() or "(empty log)"
    except OSError:
        return "(no log)"
