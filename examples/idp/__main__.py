"""`python -m examples.idp --home HOME [--port N] [--config FILE]`: serve the token service in the
foreground on 127.0.0.1 (port 0: a free one, named in `HOME/run/idp.url`; examples/loopback.py).

On start it loads (or makes) its signing key in the home's secrets and publishes the JWKS at
`HOME/idp/jwks.json` before it answers /healthz, so the CRM can be started right after it.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.idp", description="The example token service.")
    parser.add_argument("--home", type=Path, required=True, help="Citadel home: its credentials and keys, the "
                        "signing key under secrets/, the JWKS and revoked users under idp/, run files under run/")
    parser.add_argument("--port", type=int, default=0, help="loopback port (0: a free one)")
    parser.add_argument("--config", type=Path, default=None, help="Citadel config file (default: CITADEL_CONFIG)")
    args = parser.parse_args(argv)

    from citadel.config import load_config
    from examples.idp.exchange import TokenService
    from examples.idp.keys import publish_jwks, signing_key
    from examples.idp.launcher import SERVER
    from examples.idp.server import create_app
    from examples.loopback import serve

    home = args.home.resolve()
    config = load_config(args.config, environ={**os.environ, "CITADEL_HOME": str(home)})
    key = signing_key(config)
    jwks = json.loads(publish_jwks(home, key).read_text())
    serve(create_app(TokenService(config, key), jwks), home, SERVER, args.port)


if __name__ == "__main__":
    main()
