"""Start and stop the example CRM as a background process of a Citadel home (what `citadel up` and
the tests use).

The server runs in its own session (a Ctrl-C in the starting terminal does not reach it), writes
nothing outside `HOME/crm/` and `HOME/run/`, and listens on 127.0.0.1 only. `stop_crm` stops exactly
the pid in `HOME/run/crm.pid`, and only when that pid is still a CRM server (a pid reused by an
unrelated process after a crash is left alone).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from examples.crm.__main__ import run_dir

REPO = Path(__file__).resolve().parents[2]  # examples/ must be importable in the child
MODULE = "examples.crm"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
LOG_TAIL_CHARS = 2000

# Processes this interpreter started, so stopping one also reaps it (no zombie left behind).
_children: dict[int, subprocess.Popen] = {}


class CrmStartError(RuntimeError):
    """The CRM did not answer /healthz in time, or exited while starting (the message quotes its log)."""


@dataclass(frozen=True)
class CrmServer:
    home: Path
    pid: int
    url: str

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        return stop_crm(self.home, timeout_s)


def _paths(home: Path) -> tuple[Path, Path, Path]:
    run = run_dir(home)
    return run / "crm.pid", run / "crm.url", run / "crm.log"


def _is_crm(pid: int) -> bool:
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and MODULE in process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _running(home: Path) -> CrmServer | None:
    """The CRM already serving this home, if any (so starting twice is harmless)."""
    pid_file, url_file, _ = _paths(home)
    try:
        pid, url = int(pid_file.read_text()), url_file.read_text().strip()
    except (OSError, ValueError):
        return None
    return CrmServer(home, pid, url) if _is_crm(pid) and _healthy(url) else None


def start_crm(home: Path, port: int = 0, config_path: Path | None = None,
              timeout_s: float = START_TIMEOUT_S) -> CrmServer:
    """Start `python -m examples.crm` for `home` and return once /healthz answers."""
    home = home.resolve()
    running = _running(home)
    if running is not None:
        return running
    stop_crm(home)  # a stale pid file from a crashed run: stop what is still ours, clear the files
    pid_file, url_file, log_file = _paths(home)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", MODULE, "--home", str(home), "--port", str(port)]
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
            stop_crm(home)
            raise CrmStartError(f"the CRM exited with {process.returncode} while starting: {_log_tail(log_file)}")
        if url_file.exists():
            url = url_file.read_text().strip()
            if _healthy(url):
                return CrmServer(home, process.pid, url)
        time.sleep(0.1)
    stop_crm(home)
    raise CrmStartError(f"the CRM did not answer /healthz within {timeout_s:.0f}s: {_log_tail(log_file)}")


def stop_crm(home: Path, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM the home's CRM, SIGKILL it after `timeout_s`; remove its run files. True if one was stopped."""
    pid_file, url_file, _ = _paths(home.resolve())
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        pid = None
    stopped = False
    if pid is not None and _is_crm(pid):
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
