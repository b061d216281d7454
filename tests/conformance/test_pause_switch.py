"""Conformance suite for pause switches (issue 16, item 7): in process and SQLite behave the same.

Every test runs on both backends. `peer()` opens a second switch on the same data (a second connection
to the SQLite file, with its read cache off; the same object in process): what another process sees.
The SQLite-only tests at the end check what only a file can do: a pause set by another process is
seen without a restart, and the read cache is bounded.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from citadel.errors import CitadelError
from citadel.state.base import StateUnavailable
from citadel.tools.pause import (
    MAX_CACHE_TTL_S,
    MemoryPauseSwitch,
    Pause,
    PauseSwitch,
    SQLitePauseSwitch,
)
from citadel.tools.spec import MODEL_TARGET
from tests.settable_clock import SettableClock

REPO = Path(__file__).resolve().parents[2]
TOOL, OTHER_TOOL = "crm.create_discount_approval", "crm.add_note"


class Backend:
    def __init__(self, kind: str, tmp_path: Path):
        self.kind, self.path, self.clock, self.opened = kind, tmp_path / "pauses.sqlite", SettableClock(100.0), []
        self._memory: MemoryPauseSwitch | None = None

    def switch(self) -> PauseSwitch:
        if self.kind == "memory":
            self._memory = self._memory or MemoryPauseSwitch(clock=self.clock)
            return self._memory
        opened = SQLitePauseSwitch(self.path, cache_ttl_s=0.0, clock=self.clock)
        self.opened.append(opened)
        return opened

    peer = switch

    def close(self) -> None:
        for opened in self.opened:
            opened.close()


@pytest.fixture(params=["memory", "sqlite"])
def backend(request, tmp_path):
    opened = Backend(request.param, tmp_path)
    yield opened
    opened.close()


def test_nothing_is_paused_at_first(backend):
    switch = backend.switch()
    assert switch.paused() == [] and not switch.is_paused("northwind", TOOL)


def test_a_tenant_pause_pauses_that_tool_for_that_tenant_only(backend):
    switch = backend.switch()
    switch.pause("northwind", TOOL)
    assert switch.is_paused("northwind", TOOL)
    assert not switch.is_paused("globex", TOOL)
    assert not switch.is_paused("northwind", OTHER_TOOL)
    assert not switch.is_paused("northwind", MODEL_TARGET)


def test_a_pause_everywhere_pauses_every_tenant(backend):
    switch = backend.switch()
    switch.pause(None, MODEL_TARGET)
    assert switch.is_paused("northwind", MODEL_TARGET) and switch.is_paused("globex", MODEL_TARGET)
    assert not switch.is_paused("northwind", TOOL)


def test_resuming_one_scope_leaves_the_other(backend):
    switch = backend.switch()
    switch.pause(None, TOOL)
    switch.pause("northwind", TOOL)
    switch.resume("northwind", TOOL)
    assert switch.is_paused("northwind", TOOL)  # the everywhere pause still holds
    switch.pause("northwind", TOOL)
    switch.resume(None, TOOL)
    assert switch.is_paused("northwind", TOOL) and not switch.is_paused("globex", TOOL)
    switch.resume("northwind", TOOL)
    assert not switch.is_paused("northwind", TOOL)
    switch.resume("northwind", TOOL)  # resuming what is not paused is a no-op


def test_pauses_are_listed_in_order_and_pausing_twice_keeps_the_first_time(backend):
    switch = backend.switch()
    switch.pause("northwind", TOOL)
    backend.clock.now = 200.0
    switch.pause("northwind", TOOL)
    switch.pause(None, TOOL)
    switch.pause("acme", OTHER_TOOL)
    assert switch.paused() == [
        Pause("acme", OTHER_TOOL, 200.0),
        Pause(None, TOOL, 200.0),
        Pause("northwind", TOOL, 100.0),
    ]


def test_a_peer_sees_a_pause_and_a_resume_at_once(backend):
    admin, replica = backend.switch(), backend.peer()
    admin.pause("northwind", TOOL)
    assert replica.is_paused("northwind", TOOL)
    admin.resume("northwind", TOOL)
    assert not replica.is_paused("northwind", TOOL)
    assert replica.paused() == []


@pytest.mark.parametrize("tenant,target", [
    ("northwind", "CRM.Add"),
    ("northwind", ""),
    ("northwind", "crm.add_note; DROP TABLE pauses"),
    ("../etc", TOOL),
    ("North Wind", TOOL),
])
def test_a_bad_tenant_or_target_is_refused(backend, tenant, target):
    switch = backend.switch()
    with pytest.raises(CitadelError):
        switch.pause(tenant, target)
    with pytest.raises(CitadelError):
        switch.resume(tenant, target)
    assert switch.paused() == []


# ---------------------------------------------------------------------- SQLite only
def test_a_pause_set_by_another_process_is_seen_without_a_restart(tmp_path):
    path = tmp_path / "pauses.sqlite"
    switch = SQLitePauseSwitch(path, cache_ttl_s=0.0)
    try:
        assert not switch.is_paused("northwind", TOOL)
        script = textwrap.dedent(f"""
            from citadel.tools.pause import SQLitePauseSwitch
            switch = SQLitePauseSwitch({str(path)!r})
            switch.pause("northwind", {TOOL!r})
            switch.close()
        """)
        subprocess.run([sys.executable, "-c", script], cwd=REPO, check=True, timeout=120)
        assert switch.is_paused("northwind", TOOL)
    finally:
        switch.close()


def test_the_read_cache_is_bounded_and_our_own_changes_skip_it(tmp_path):
    ticks = SettableClock(0.0)
    cached = SQLitePauseSwitch(tmp_path / "p.sqlite", cache_ttl_s=MAX_CACHE_TTL_S, monotonic=ticks)
    other = SQLitePauseSwitch(tmp_path / "p.sqlite", cache_ttl_s=0.0)
    try:
        assert not cached.is_paused("northwind", TOOL)  # fills the cache
        other.pause("northwind", TOOL)
        assert not cached.is_paused("northwind", TOOL)  # served from the cache…
        ticks.now = MAX_CACHE_TTL_S
        assert cached.is_paused("northwind", TOOL)  # …for at most the ttl
        cached.resume("northwind", TOOL)
        assert not cached.is_paused("northwind", TOOL)  # its own change: at once
    finally:
        cached.close()
        other.close()
    with pytest.raises(ValueError):
        SQLitePauseSwitch(tmp_path / "q.sqlite", cache_ttl_s=5.0)


def test_an_unusable_file_is_unavailable_never_not_paused(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StateUnavailable):
        SQLitePauseSwitch(blocker / "pauses.sqlite")
