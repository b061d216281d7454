"""`citadel logs show REQUEST_ID`: a kept prompt and reply, for a platform admin, every read audited.

The home's files alone do not make a reader: the command asks for a platform (all-tenant) admin
credential (`--credential`, or the CITADEL_ADMIN_TOKEN environment variable), checked like the
HTTP API checks it, and the read is written to the catalog's audit log under that admin's id and the
operating-system user who ran it before the prompt is printed.
"""

from __future__ import annotations

import getpass
import json
import sys
from pathlib import Path
from typing import Optional

import typer

from citadel.wiring import Wiring

logs_app = typer.Typer(help="Kept prompts (encrypted; platform admins only, every read audited).",
                       no_args_is_help=True)
ADMIN_TOKEN_ENV = "CITADEL_ADMIN_TOKEN"


@logs_app.command("show")
def show(
    request_id: str = typer.Argument(..., help="The request id (an answer's `request_id`)."),
    credential: Optional[str] = typer.Option(None, "--credential", envvar=ADMIN_TOKEN_ENV,
                                             help="A platform admin's bearer credential."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML config file."),
) -> None:
    """Print what the generator was sent and returned for REQUEST_ID (JSON)."""
    from citadel.errors import CitadelError
    from citadel.guardrails.prompt_vault import read_audited

    runtime = Wiring(config_path=config)
    try:
        admin = runtime.authenticator.require_admin(f"Bearer {credential or ''}")
        if not admin.platform_admin:
            _fail(f"admin {admin.id!r} is not a platform (all-tenant) admin")
        vault = runtime.prompt_vault
        actor = f"{admin.id} (cli: {_os_user()})"
        kept = read_audited(vault, runtime.raw_catalog, actor, request_id, "cli") if vault is not None else None
    except CitadelError as error:
        _fail(error.message)
    if kept is None:
        _fail("no prompt is kept for this request")
    print(json.dumps(kept.to_dict(), indent=1, ensure_ascii=False))


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name (a container without passwd entry): the audit still names the admin
        return "unknown"


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(1)
