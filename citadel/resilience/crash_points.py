"""Fault hooks for crash drills: pause a process at a named point so a test can kill it exactly there.

Set `CITADEL_FAULT_PAUSE_AT=<point>` (and optionally `CITADEL_FAULT_MARKER=<file>`) in the process's
environment. When it reaches that point it writes its pid to the marker file and sleeps, so the test
knows the moment has come and sends SIGKILL. Unset, a fault point costs one environment lookup.

A point passed with `once=True` pauses only the first time anywhere: when the marker file already
exists (this process or a killed one paused there before) it is passed without pausing, so the
driver that resumes a killed one's work gets through. `once` needs a marker; without one the point
pauses every time.

`CITADEL_FAULT_LEDGER=<file>`: while a point is armed, every pass through it (paused or not) appends
one line `<pid> <point> <detail>` to that file, so a drill can count what ran, and in which process.

Points:
- `BEFORE_PUBLISH` (ingestion, citadel/ingest/steps.py): the segment is built and verified, the
  catalog's pointer not yet switched.
- `AFTER_STEP` (agentic runs, through `after_step`, the orchestrator's hook that
  `citadel.wiring.Wiring.make_orchestrator` installs): a step's result and its event are recorded,
  the next step not started. Passed once (see above), with detail `<run_id> <step_id>`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PAUSE_AT_ENV = "CITADEL_FAULT_PAUSE_AT"
MARKER_ENV = "CITADEL_FAULT_MARKER"
LEDGER_ENV = "CITADEL_FAULT_LEDGER"
# A forgotten hook must not hang a process forever.
MAX_PAUSE_S = 600.0
_POLL_S = 0.2

BEFORE_PUBLISH = "before_publish"  # segment built and verified, catalog pointer not yet switched
AFTER_STEP = "agent_after_step"  # a run's step recorded (result and event), the next not started


def fault_point(name: str, *, once: bool = False, detail: str = "") -> None:
    """Pause here (and signal the marker file) when the environment names this point; with `once`,
    only if the marker file does not exist yet."""
    if os.environ.get(PAUSE_AT_ENV) != name:
        return
    ledger = os.environ.get(LEDGER_ENV)
    if ledger:
        with open(ledger, "a") as file:  # one short append per pass: whole lines, even from many processes
            file.write(f"{os.getpid()} {name} {detail}".rstrip() + "\n")
    marker = os.environ.get(MARKER_ENV)
    if once and marker and Path(marker).exists():
        return
    if marker:
        Path(marker).write_text(str(os.getpid()))
    deadline = time.monotonic() + MAX_PAUSE_S
    while time.monotonic() < deadline:
        time.sleep(_POLL_S)
    raise RuntimeError(f"fault point {name!r}: paused {MAX_PAUSE_S:.0f}s and nobody killed the process")


def after_step(run_id: str, step_id: str) -> None:
    """The orchestrator's `after_step` hook: the `AFTER_STEP` point, paused at once per drill. Unarmed
    (the production case) it costs one environment lookup per step."""
    if os.environ.get(PAUSE_AT_ENV) == AFTER_STEP:
        fault_point(AFTER_STEP, once=True, detail=f"{run_id} {step_id}")
