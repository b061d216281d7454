"""Every RunDriver runs the run-driver suite (tests/conformance/suites/run_driver.py): the
Orchestrator this process builds, and the proxy to the orchestrator deployment (RemoteOrchestrator)
through a fake Serve handle over a replica of it."""

from __future__ import annotations

import pytest

from tests.conformance.suites.run_driver import RunDriverConformance
from tests.fake_serve import FakeServeHandle, OrchestratorReplica


class TestOrchestrator(RunDriverConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, wiring):
        return wiring.orchestrator


class TestRemoteOrchestrator(RunDriverConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, wiring):
        from serving.ray.remote import RemoteOrchestrator

        return RemoteOrchestrator(FakeServeHandle(OrchestratorReplica(wiring.orchestrator)), timeout_s=60.0)
