"""The local engine runs the IngestEngine suite (tests/conformance/suites/ingest_engine.py); Ray Data
runs it in tests/ray/test_ray_ingest_engine.py, on one local Ray instance."""

from __future__ import annotations

import pytest

from tests.conformance.suites.ingest_engine import IngestEngineConformance


class TestLocalIngestEngine(IngestEngineConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, wiring):
        return wiring.ingestor()
