"""The PauseSwitch suite (citadel/tools/pause.py): in process and SQLite behave the same.

`peer()` opens a second switch on the same data (a second connection to the SQLite file, with its
read cache off; the same object in process): what another process sees.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from citadel.errors import CitadelError
from citadel.tools.pause import MemoryPauseSwitch, Pause, PauseSwitch, SQLitePauseSwitch
from citadel.tools.spec import MODEL_TARGET
from tests.settable_clock import SettableClock

REPO = Path(__file__).resolve().parents[3]
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


class PauseSwitchConformance:
    """Override `backend` with a Backend of one kind: `switch()` opens a switch, `peer()` a second one
    on the same data."""

    @pytest.fixture
    def backend(self):
        raise NotImplementedError("a conformance subclass provides the backend under test")

    def test_nothing_is_paused_at_first(self, backend):
        switch = backend.switch()
        assert switch.paused() == [] and not switch.is_paused("northwind", TOOL)

    def test_a_tenant_pause_pauses_that_tool_for_that_tenant_only(self, backend):
        switch = backend.switch()
        switch.pause("northwind", TOOL)
        assert switch.is_paused("northwind", TOOL)
        assert not switch.is_paused("globex", TOOL)
        assert not switch.is_paused("northwind", OTHER_TOOL)
        assert not switch.is_paused("northwind", MODEL_TARGET)

    def test_a_pause_everywhere_pauses_every_tenant(self, backend):
        switch = backend.switch()
        switch.pause(None, MODEL_TARGET)
        assert switch.is_paused("northwind", MODEL_TARGET) and switch.is_paused("globex", MODEL_TARGET)
        assert not switch.is_paused("northwind", TOOL)

    def test_resuming_one_scope_leaves_the_other(self, backend):
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

    def test_pauses_are_listed_in_order_and_pausing_twice_keeps_the_first_time(self, backend):
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

    def test_a_peer_sees_a_pause_and_a_resume_at_once(self, backend):
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
    def test_a_bad_tenant_or_target_is_refused(self, backend, tenant, target):
        switch = backend.switch()
        with pytest.raises(CitadelError):
            switch.pause(tenant, target)
        with pytest.raises(CitadelError):
            switch.resume(tenant, target)
        assert switch.paused() == []
