"""Start and stop the example CRM as a background process of a Citadel home (what `citadel up` and
the tests use); the process handling is examples/loopback.py's, shared with the token service.

The CRM writes nothing outside `HOME/crm/` and `HOME/run/` and listens on 127.0.0.1 only.
`stop_crm` stops exactly the pid in `HOME/run/crm.pid`, and only while that pid is still a CRM server.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from examples import loopback
from examples.loopback import START_TIMEOUT_S, STOP_TIMEOUT_S, ServerStartError

SERVER = loopback.ExampleServer("crm", "examples.crm")
CrmStartError = ServerStartError  # the CRM did not answer /healthz in time, or exited while starting


@dataclass(frozen=True)
class CrmServer:
    home: Path
    pid: int
    url: str

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        return stop_crm(self.home, timeout_s)


def start_crm(home: Path, port: int = 0, config_path: Path | None = None,
              timeout_s: float = START_TIMEOUT_S) -> CrmServer:
    """Start `python -m examples.crm` for `home` and return once /healthz answers (or the running one).
    With the default `tools.delegation` it verifies the token service's JWKS: start that first."""
    home = Path(home).resolve()
    pid, url = loopback.start(home, SERVER, port, config_path, timeout_s)
    return CrmServer(home, pid, url)


def stop_crm(home: Path, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM the home's CRM, SIGKILL it after `timeout_s`; remove its run files. True if one was stopped."""
    return loopback.stop(Path(home), SERVER, timeout_s)
