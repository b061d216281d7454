"""Fixtures for tests on a local Ray instance: each test starts its own (2 CPUs, 127.0.0.1 only) and
shuts it down. Test modules call `pytest.importorskip("ray")`, so the folder skips cleanly without Ray."""

from __future__ import annotations

import importlib.util

import pytest
from ray_helpers import pipeline_settings


@pytest.fixture
def ray_runtime(make_runtime):
    """A Wiring (hash embedder, fresh home) and a local Ray instance for the test's duration."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed")
    from cluster.ray_local import local_ray

    runtime = make_runtime()
    pipeline_settings(runtime.config)
    with local_ray(runtime.config.ingest_pipeline):
        yield runtime

