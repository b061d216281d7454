"""`python -m examples.crm --home HOME [--port N] [--config FILE]`: serve the CRM in the foreground.

Binds 127.0.0.1 only (the CRM is reached by local tools, never from outside). Port 0 picks a free
port: the socket is bound here first and only then is `HOME/run/crm.url` written, so whoever waits
for that file learns the real address without racing for a port. Callers are verified against the
Citadel home's credentials and service keys (or the config given), the same ones its gateway uses.
"""

from __future__ import annotations

import argparse
import os
import socket
from pathlib import Path

LOOPBACK = "127.0.0.1"


def run_dir(home: Path) -> Path:
    return home / "run"


def db_path(home: Path) -> Path:
    return home / "crm" / "crm.sqlite"


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a reader sees the whole URL or no file, never half of it


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.crm", description="The example CRM service.")
    parser.add_argument("--home", type=Path, required=True, help="Citadel home: keys to verify callers, "
                        "the CRM database under crm/, run files under run/")
    parser.add_argument("--port", type=int, default=0, help="loopback port (0: a free one)")
    parser.add_argument("--config", type=Path, default=None, help="Citadel config file (default: CITADEL_CONFIG)")
    args = parser.parse_args(argv)

    import uvicorn

    from citadel.config import load_config
    from examples.crm.server import create_app, verifier_from_config

    home = args.home.resolve()
    config = load_config(args.config, environ={**os.environ, "CITADEL_HOME": str(home)})
    app = create_app(db_path(home), verifier_from_config(config))

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, args.port))
    url_file = run_dir(home) / "crm.url"
    url_file.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(url_file, f"http://{LOOPBACK}:{sock.getsockname()[1]}\n")
    try:
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    finally:
        url_file.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
