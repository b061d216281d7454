"""`python -m examples.crm --home HOME [--port N] [--config FILE]`: serve the CRM in the foreground.

Binds 127.0.0.1 only (the CRM is reached by local tools, never from outside); port 0 picks a free one
and `HOME/run/crm.url` names it (examples/loopback.py). Callers are verified with the Citadel home's
config: access tokens of the token service (examples/idp) by default (`tools.delegation`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def db_path(home: Path) -> Path:
    return home / "crm" / "crm.sqlite"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.crm", description="The example CRM service.")
    parser.add_argument("--home", type=Path, required=True, help="Citadel home: keys to verify callers, "
                        "the CRM database under crm/, run files under run/")
    parser.add_argument("--port", type=int, default=0, help="loopback port (0: a free one)")
    parser.add_argument("--config", type=Path, default=None, help="Citadel config file (default: CITADEL_CONFIG)")
    args = parser.parse_args(argv)

    from citadel.config import load_config
    from examples.crm.launcher import SERVER
    from examples.crm.server import create_app, verifier_from_config
    from examples.loopback import serve

    home = args.home.resolve()
    config = load_config(args.config, environ={**os.environ, "CITADEL_HOME": str(home)})
    serve(create_app(db_path(home), verifier_from_config(config)), home, SERVER, args.port)


if __name__ == "__main__":
    main()
