"""Ray Data runs the IngestEngine suite (tests/conformance/suites/ingest_engine.py) on one local Ray
instance (2 CPUs, 127.0.0.1 only) for the whole class: its job runs twice, and each test reads what
those runs left."""

from __future__ import annotations

import pytest
from ray_helpers import pipeline_settings

pytest.importorskip("ray")

from tests.conformance.suites.ingest_engine import IngestEngineConformance  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


class TestRayDataIngestEngine(IngestEngineConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, wiring):
        from cluster.ray_local import local_ray
        from indexing.pipeline import RayDataEngine

        pipeline_settings(wiring.config)
        with local_ray(wiring.config.ingest_pipeline):
            yield RayDataEngine(wiring.catalog, wiring.config)
