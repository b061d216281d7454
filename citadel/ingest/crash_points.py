"""Fault hooks for crash drills: pause a job at a named point so a test can kill it exactly there.

Set `CITADEL_FAULT_PAUSE_AT=<point>` (and optionally `CITADEL_FAULT_MARKER=<file>`) in the job's
environment. When the job reaches that point it writes its pid to the marker file and sleeps, so the
test knows the moment has come and sends SIGKILL. Unset, a fault point costs one dict lookup.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PAUSE_AT_ENV = "CITADEL_FAULT_PAUSE_AT"
MARKER_ENV = "CITADEL_FAULT_MARKER"
# A forgotten hook must not hang a job forever.
MAX_PAUSE_S = 600.0
_POLL_S = 0.2

BEFORE_PUBLISH = "before_publish"  # segment built and verified, catalog pointer not yet switched


def fault_point(name: str) -> None:
    """Pause here (and signal the marker file) when the environment names this point."""
    if os.environ.get(PAUSE_AT_ENV) != name:
        return
    marker = os.environ.get(MARKER_ENV)
    if marker:
        Path(marker).write_text(str(os.getpid()))
    deadline = time.monotonic() + MAX_PAUSE_S
    while time.monotonic() < deadline:
        time.sleep(_POLL_S)
    raise RuntimeError(f"fault point {name!r}: paused {MAX_PAUSE_S:.0f}s and nobody killed the job")
