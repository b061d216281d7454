"""Shared fixtures: a Citadel home with the fake embedder, and the path to the shared data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The suite's many hash-embedder homes answer from the gate alone: confirming the asked fact needs the
# trained reader (a model load per process), and the tests that exercise it turn it on themselves
# (tests/unit/test_confirm.py with the fake reader; the regression set with the trained one). Servers
# and CLIs the tests start inherit this.
os.environ.setdefault("CITADEL_ANSWER__CONFIRM", "false")

from tests.redis_server import redis_url  # noqa: F401  (a session fixture for every folder)

# The conformance suites (tests/conformance/suites/) are classes test modules in several folders
# subclass; pytest rewrites their asserts as it does a test module's.
pytest.register_assert_rewrite("tests.conformance.suites")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO / ".." / "shared" / "data").resolve()


def shared_data(*parts: str) -> Path:
    """A path under ../shared/data, or skip the test with a clear message when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not found at {path} (see ../shared/data/SOURCES.md)")
    return path


@pytest.fixture
def make_runtime(tmp_path):
    """Build a Wiring on a fresh home with the deterministic hash embedder and config overrides."""
    from citadel.wiring import Wiring
    from citadel.config import load_config

    runtimes = []

    def build(**sections):
        config = load_config(environ={"CITADEL_ANSWER__CONFIRM": "false", "CITADEL_HOME": str(tmp_path / "home"), "CITADEL_EMBEDDING__BACKEND": "hash"})
        for section, values in sections.items():
            for key, value in values.items():
                setattr(getattr(config, section), key, value)
        runtime = Wiring(config=config)
        runtimes.append(runtime)
        return runtime

    yield build
    for runtime in runtimes:
        runtime.close()
