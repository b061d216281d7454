"""What a test needs from the machine (a server, a browser, a tool): skipped with a message where it
is absent, a failure where CI asked for it with CITADEL_REQUIRE_<NAME>=1 (.ci/run installs it)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(name: str, message: str, skipped: str) -> NoReturn:
    """`message` says what is absent; `skipped`, what is skipped without it."""
    variable = f"CITADEL_REQUIRE_{name}"
    if os.environ.get(variable) == "1":
        pytest.fail(f"{message}; {variable}=1 requires it")
    pytest.skip(f"{message}; {skipped}")
