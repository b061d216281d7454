"""A private Postgres server for the tests that need a real one (the catalog conformance suite).

`initdb` into a fresh temporary directory, `pg_ctl start` listening on 127.0.0.1 only (a free port,
its Unix socket in the same directory), trust authentication for one local test user, fsync off;
stopped (`pg_ctl stop -m fast`) and removed at the end of the session. Postgres refuses to run as
root, so under root the server runs as the `postgres` system user (created if missing).

The binaries are looked up on PATH, in /usr/local/bin, then in /usr/lib/postgresql/<version>/bin
(Debian's `postgresql` package, which CI installs). Without them the Postgres tests are skipped,
unless CITADEL_REQUIRE_POSTGRES=1, which makes their absence a failure.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.required import missing

PG_USER = "citadel"
PG_SYSTEM_USER = "postgres"
PG_START_TIMEOUT_S = 30
PG_STOP_TIMEOUT_S = 30
PG_POLL_S = 0.1


def _require(message: str) -> None:
    missing("POSTGRES", message, "the Postgres tests are skipped")


def find_postgres_bin() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres, or None."""
    candidates: list[Path] = []
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    candidates.append(Path("/usr/local/bin"))
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                      key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0, reverse=True)
    candidates += [Path(p) for p in versions]
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres")):
            return directory
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _system_user() -> str | None:
    """The user to run the server as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        PG_SYSTEM_USER], check=True, capture_output=True)
    return PG_SYSTEM_USER


def _as(user: str | None, args: list[str]) -> list[str]:
    return args if user is None else ["runuser", "-u", user, "--", *args]


def _run(args: list[str], what: str, timeout: float) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        pytest.fail(f"{what} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def _wait_ready(dsn: str, log: Path) -> None:
    import psycopg

    deadline = time.monotonic() + PG_START_TIMEOUT_S
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                text = log.read_text() if log.exists() else ""
                pytest.fail(f"postgres did not accept connections within {PG_START_TIMEOUT_S} s:\n{text}")
            time.sleep(PG_POLL_S)


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The admin DSN (database `postgres`, superuser `citadel`, trust auth) of a private server on a
    free 127.0.0.1 port; always stopped and removed afterwards."""
    bindir = find_postgres_bin()
    if bindir is None:
        _require("no Postgres binaries (initdb, pg_ctl, postgres) on PATH, in /usr/local/bin or "
                 "/usr/lib/postgresql/*/bin (install the Debian package `postgresql`)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _require("psycopg is not installed (pip install 'psycopg[binary]' psycopg-pool)")
    user = _system_user()
    workdir = Path(tempfile.mkdtemp(prefix="citadel-pg-"))
    if user is not None:
        shutil.chown(workdir, user=user)
    data, log = workdir / "data", workdir / "postgres.log"
    port = _free_port()
    started = False
    try:
        _run(_as(user, [str(bindir / "initdb"), "-D", str(data), "-U", PG_USER, "--auth=trust", "-E", "UTF8",
                        "--locale=C", "--no-sync"]), "initdb", timeout=120)
        options = (f"-k {workdir} -c listen_addresses=127.0.0.1 -p {port} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        _run(_as(user, [str(bindir / "pg_ctl"), "start", "-D", str(data), "-l", str(log), "-w",
                        "-t", str(PG_START_TIMEOUT_S), "-o", options]), "pg_ctl start", timeout=PG_START_TIMEOUT_S + 10)
        started = True
        dsn = f"postgresql://{PG_USER}@127.0.0.1:{port}/postgres"
        _wait_ready(dsn, log)
        yield dsn
    finally:
        if started:
            subprocess.run(_as(user, [str(bindir / "pg_ctl"), "stop", "-D", str(data), "-m", "fast", "-w",
                                      "-t", str(PG_STOP_TIMEOUT_S)]),
                           capture_output=True, timeout=PG_STOP_TIMEOUT_S + 10)
        shutil.rmtree(workdir, ignore_errors=True)


def fresh_database(admin_dsn: str) -> tuple[str, Callable[[], None]]:
    """Create an empty database on the server; returns its DSN and a function that drops it."""
    import psycopg
    from psycopg import sql

    name = f"t_{uuid.uuid4().hex[:20]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    dsn = admin_dsn.rsplit("/", 1)[0] + "/" + name

    def drop() -> None:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    return dsn, drop
