"""Every PauseSwitch runs the pause-switch suite (tests/conformance/suites/pause_switch.py): in process
and SQLite. The SQLite-only tests below check what only a file can do: a pause set by another process
is seen without a restart, and the read cache is bounded.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from citadel.state.base import StateUnavailable
from citadel.tools.pause import MAX_CACHE_TTL_S, SQLitePauseSwitch
from tests.settable_clock import SettableClock
from tests.conformance.suites.pause_switch import PauseSwitchConformance, Backend, REPO, TOOL


class TestMemoryPauseSwitch(PauseSwitchConformance):
    @pytest.fixture
    def backend(self, tmp_path):
        opened = Backend("memory", tmp_path)
        yield opened
        opened.close()


class TestSQLitePauseSwitch(PauseSwitchConformance):
    @pytest.fixture
    def backend(self, tmp_path):
        opened = Backend("sqlite", tmp_path)
        yield opened
        opened.close()


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
