"""Fixtures the regression tests share: one home with the four handbook tenants, built once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from citadel.eval import rag

KEEP_HOME_ENV = "CITADEL_REGRESSION_HOME"


@pytest.fixture(scope="session")
def rag_runtime(tmp_path_factory):
    """The four handbook tenants and the overlay in a fresh home, built once for the session: the regression
    set, the paraphrase set and the release gate's tests share it."""
    corpora = rag.SHARED_DATA / "corpora"
    if not corpora.is_dir():
        pytest.skip(f"shared handbook data not found at {corpora} (see ../shared/data/SOURCES.md)")
    from citadel.wiring import Wiring
    from citadel.config import load_config

    # CI keeps this home for the release gate it runs after the suite (.ci/run), so the tenants are built once.
    kept = os.environ.get(KEEP_HOME_ENV)
    home = Path(kept) if kept else tmp_path_factory.mktemp("rag-home")
    config = load_config(environ={"CITADEL_HOME": str(home), "CITADEL_EMBEDDING__BACKEND": "minilm",
                                  "CITADEL_ANSWER__GENERATOR": "extractive", "CITADEL_ANSWER__CONFIRM": "true"})
    runtime = Wiring(config=config)
    try:
        rag.build_tenants(runtime, rag.SHARED_DATA, rag.DEFAULT_OVERLAY)
        yield runtime
    finally:
        runtime.close()
