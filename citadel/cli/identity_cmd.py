"""`citadel token` and `citadel credentials ...`: mint test user contexts, manage service credentials."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from citadel.cli.runtime import Runtime

credentials_app = typer.Typer(help="Service bearer credentials (stored hashed).", no_args_is_help=True)
console = Console(stderr=True)
ConfigOption = typer.Option(None, "--config", help="YAML config file (else CITADEL_CONFIG, then defaults).")
DEFAULT_TTL_S = 600  # long enough to paste into a few curl calls, under the default max_ttl_s (900)


def token(
    tenant: str = typer.Option(..., "--tenant"),
    user: str = typer.Option(..., "--user"),
    groups: str = typer.Option("", "--groups", help="Comma-separated groups of the user."),
    service: str = typer.Option(..., "--service", help="Calling service id the context is bound to."),
    ttl: int = typer.Option(DEFAULT_TTL_S, "--ttl", min=1, help="Lifetime in seconds (at most identity.max_ttl_s)."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Print a signed user context for the x-citadel-user-context header (creates the signing key if absent)."""
    from citadel.identity import sign_user_context, signing_key_from

    settings = Runtime(config_path=config).config
    if ttl > settings.identity.max_ttl_s:
        _fail(f"--ttl {ttl} exceeds identity.max_ttl_s ({settings.identity.max_ttl_s}); the gateway would reject it")
    names = [g.strip() for g in groups.split(",") if g.strip()]
    try:
        signed = sign_user_context(signing_key_from(settings, create=True), tenant, user, names, service,
                                   ttl, settings.identity.audience, time.time())
    except ValueError as error:
        _fail(str(error))
    print(signed)


@credentials_app.command("add")
def credentials_add(
    name: str = typer.Argument(..., help="Service id."),
    admin: bool = typer.Option(False, "--admin", help="May call the admin endpoints."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Create a bearer token for a service; it is printed once and only its SHA-256 is stored."""
    from citadel.identity import add_credential

    path = Runtime(config_path=config).config.credentials_path
    try:
        secret = add_credential(path, name, admin=admin)
    except ValueError as error:
        _fail(str(error))
    console.print(f"stored the SHA-256 of a new token for {name!r} in {path}; it is not shown again")
    print(secret)


@credentials_app.command("list")
def credentials_list(config: Optional[Path] = ConfigOption) -> None:
    """Service ids, admin flags and a short hash fingerprint (never the full hash)."""
    from citadel.identity import FINGERPRINT_CHARS, read_credentials_file

    settings = Runtime(config_path=config).config
    sources = [("config", c) for c in settings.identity.services]
    sources += [("file", c) for c in read_credentials_file(settings.credentials_path)]
    print(json.dumps([{"id": c.id, "admin": c.admin, "source": source,
                       "fingerprint": c.token_sha256[:FINGERPRINT_CHARS]} for source, c in sources], indent=1))


def _fail(message: str, code: int = 2) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)
