"""`citadel up` / `citadel down`: a local cluster that outlives the command (DESIGN.md §8, §9).

`up` starts a supervisor process in its own session; the supervisor starts a loopback-only Ray
instance, Serve and the app, then waits. `down` signals that supervisor, which shuts down Serve and
the Ray instance it started (never `ray stop`), and only if it does not exit in time kills the
supervisor's own process group. The pid, URL and log live under <home>/run/.

For local use `up` also makes sure two credentials exist, an app service (with its HS256 signing key)
and a platform admin, both for every tenant of this one-machine install, writing their tokens to
<home>/secrets/*.token (0600) so scripts and the demo can call the API.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from citadel.config import CitadelConfig
from citadel.identity.credentials import ALL_TENANTS, kept_token
from citadel.identity.keys import current_service_key

if TYPE_CHECKING:
    from serving.ray.local import JobRunnerScope

LOCAL_APP_SERVICE = "local-app"
LOCAL_ADMIN_SERVICE = "local-admin"
STOP_TIMEOUT_S = 60.0
POLL_S = 0.25


class LauncherError(RuntimeError):
    """A local cluster is already running, never came up, or is not running."""


@dataclass(frozen=True)
class RunFiles:
    root: Path

    @classmethod
    def of(cls, config: CitadelConfig) -> "RunFiles":
        return cls(Path(config.home).resolve() / "run")

    @property
    def pid(self) -> Path:
        return self.root / "citadel.pid"

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def log(self) -> Path:
        return self.root / "citadel.log"

    @property
    def ready(self) -> Path:
        return self.root / "ready.json"


def token_path(config: CitadelConfig, service_id: str) -> Path:
    return config.secrets_dir.resolve() / f"{service_id}.token"


def ensure_local_identity(config: CitadelConfig) -> dict[str, Path]:
    """The local app's signing key, and a local app and admin credential whose tokens are kept in
    files. A credential from before tenant scopes (acting for no tenant) is re-issued."""
    current_service_key(config.service_keys_path, LOCAL_APP_SERVICE, create=True)
    paths = {}
    for service, admin in ((LOCAL_APP_SERVICE, False), (LOCAL_ADMIN_SERVICE, True)):
        paths[service] = token_path(config, service)
        kept_token(config.credentials_path, paths[service], service, [ALL_TENANTS], admin=admin)
    return paths


def _alive(pid: int) -> bool:
    _reap(pid)  # when `up` ran in this process the supervisor is our child: an exited one is a zombie
    return psutil.pid_exists(pid)


def running_pid(files: RunFiles) -> int | None:
    if not files.pid.exists():
        return None
    pid = int(files.pid.read_text().strip() or 0)
    return pid if pid and _alive(pid) else None


def up(config: CitadelConfig, timeout_s: float = 180.0, supervisor: str = "serving.ray.launcher") -> str:
    """Start the supervisor (`supervisor`: the module run as it; `citadel up`'s, citadel/cli/supervisor.py,
    adds the deployment's job runner actor) and wait until the app answers /healthz; returns the URL."""
    from serving.ray.local import wait_healthy

    files = RunFiles.of(config)
    if running_pid(files) is not None:
        raise LauncherError(f"a local cluster is already running (pid {files.pid.read_text().strip()}); "
                            "run `citadel down` first")
    files.root.mkdir(parents=True, exist_ok=True)
    config = config.model_copy(deep=True)
    config.home = Path(config.home).resolve()
    ensure_local_identity(config)
    if config.tools.example_crm:
        config.tools.endpoints = {**config.tools.endpoints, "crm": _start_example_crm(config)}
    files.config.write_text(config.model_dump_json())
    files.ready.unlink(missing_ok=True)
    with open(files.log, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", supervisor, str(files.config)],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    files.pid.write_text(str(process.pid))
    deadline = time.monotonic() + timeout_s
    while not files.ready.exists():
        if process.poll() is not None:
            files.pid.unlink(missing_ok=True)
            _stop_example_servers(config)  # never leave the CRM or token service running behind a failed start
            raise LauncherError(f"the cluster exited with {process.returncode}; see {files.log}")
        if time.monotonic() > deadline:
            down(config)
            raise LauncherError(f"the cluster did not come up within {timeout_s:g} s; see {files.log}")
        time.sleep(POLL_S)
    url = json.loads(files.ready.read_text())["url"]
    wait_healthy(url, max(1.0, deadline - time.monotonic()))
    return url


def direct_urls(config: CitadelConfig) -> list[str]:
    """The running cluster's ingress replicas' own URLs as it started (serving.direct_ingress; empty
    otherwise). A replica that restarts may take another port: Serve's proxy at `up`'s URL always answers."""
    files = RunFiles.of(config)
    if running_pid(files) is None or not files.ready.exists():
        return []
    return list(json.loads(files.ready.read_text()).get("direct_urls") or [])


def _start_example_crm(config: CitadelConfig) -> str:
    """The example CRM the tools reach (examples/crm), on loopback, for this home; its URL. The tools'
    credential is made first: the servers read the home's credentials when they start. Unless the
    test-only `local_test_hs256` is chosen, the users' token service (examples/idp) starts before the
    CRM (the CRM verifies its JWKS), and `tools.token_service_url` points at it."""
    from citadel.identity.credentials import ALL_TENANTS
    from citadel.tools.caller import tool_caller
    from examples.crm.launcher import start_crm
    from examples.idp.launcher import start_idp

    tool_caller(config, [ALL_TENANTS])
    if config.tools.delegation == "token_exchange":
        config.tools.token_service_url = start_idp(Path(config.home)).url
    try:
        return start_crm(Path(config.home)).url
    except BaseException:
        _stop_example_servers(config)
        raise


def _stop_example_servers(config: CitadelConfig) -> None:
    if config.tools.example_crm:
        from examples.crm.launcher import stop_crm
        from examples.idp.launcher import stop_idp

        stop_crm(Path(config.home).resolve())
        stop_idp(Path(config.home).resolve())


def down(config: CitadelConfig, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """Stop the cluster `up` started (only that one), and the example CRM and token service if it
    started them. Returns False when no cluster was running."""
    _stop_example_servers(config)
    files = RunFiles.of(config)
    pid = running_pid(files)
    if pid is None:
        files.pid.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    if _alive(pid):  # it ignored the request: end its own process group (its session, made by `up`)
        os.killpg(pid, signal.SIGKILL)
    files.pid.unlink(missing_ok=True)
    files.ready.unlink(missing_ok=True)
    return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def supervise(config_path: Path, job_runner: "JobRunnerScope | None" = None) -> None:
    """The supervisor: Ray, Serve and the app until SIGTERM, then an orderly shutdown. `job_runner`:
    the deployment's job runner actor, which `citadel up`'s supervisor (citadel/cli/supervisor.py)
    passes (serving does not import indexing)."""
    from serving.ray.local import APP_NAME, serve_locally
    from serving.ray.status import direct_ingress_urls

    config = CitadelConfig.model_validate_json(Path(config_path).read_text())
    files = RunFiles.of(config)
    stop = threading.Event()
    with serve_locally(config, job_runner=job_runner) as url:
        # Installed after ray.init, which sets handlers of its own: ours lets the block unwind.
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        # Written aside and renamed: `up` reads the file as soon as it exists, never half-written.
        partial = files.ready.with_suffix(".partial")
        direct = direct_ingress_urls(APP_NAME, config.serving.host)  # none unless Serve's direct ingress is on
        partial.write_text(json.dumps({"url": url, "pid": os.getpid(), "topology": config.serving.topology,
                                       "direct_urls": direct}))
        os.replace(partial, files.ready)
        replicas = f"; replicas at {' '.join(direct)}" if direct else ""
        print(f"citadel serving {config.serving.topology} at {url}{replicas}", flush=True)
        stop.wait()
    print("citadel stopped", flush=True)


if __name__ == "__main__":
    supervise(Path(sys.argv[1]))
