"""Start and stop the example token service as a background process of a Citadel home (what
`citadel up`, the demo and the tests use); the process handling is examples/loopback.py's.

Start it before the CRM: the CRM verifies tokens with the JWKS the token service publishes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from examples import loopback
from examples.loopback import START_TIMEOUT_S, STOP_TIMEOUT_S

SERVER = loopback.ExampleServer("idp", "examples.idp")


@dataclass(frozen=True)
class IdpServer:
    home: Path
    pid: int
    url: str

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        return stop_idp(self.home, timeout_s)


def start_idp(home: Path, port: int = 0, config_path: Path | None = None,
              timeout_s: float = START_TIMEOUT_S) -> IdpServer:
    """Start `python -m examples.idp` for `home`; returns once /healthz answers (or the running one)."""
    home = Path(home).resolve()
    pid, url = loopback.start(home, SERVER, port, config_path, timeout_s)
    return IdpServer(home, pid, url)


def stop_idp(home: Path, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM the home's token service (SIGKILL after `timeout_s`), remove its run files."""
    return loopback.stop(Path(home), SERVER, timeout_s)
