"""`citadel token` and `citadel credentials ...`: mint test user contexts, manage service credentials
(tenants, expiry, revocation) and the per-service HS256 keys contexts are signed with."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from citadel.wiring import Wiring
credentials_app = typer.Typer(help="Service bearer credentials (stored hashed) and their signing keys.",
                              no_args_is_help=True)
console = Console(stderr=True)
ConfigOption = typer.Option(None, "--config", help="YAML config file (else CITADEL_CONFIG, then defaults).")
DEFAULT_TTL_S = 600  # long enough to paste into a few curl calls, under the default max_ttl_s (900)
DURATION = re.compile(r"^(\d{1,9})([smhd]?)$")
SECONDS_PER = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}


def token(
    tenant: str = typer.Option(..., "--tenant"),
    user: str = typer.Option(..., "--user"),
    groups: str = typer.Option("", "--groups", help="Comma-separated groups of the user."),
    service: str = typer.Option(..., "--service", help="Calling service id the context is bound to."),
    ttl: int = typer.Option(DEFAULT_TTL_S, "--ttl", min=1, help="Lifetime in seconds (at most identity.max_ttl_s)."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Print a user-context JWT for the x-citadel-user-context header, signed with the service's
    newest HS256 key (created if the service has none)."""
    from citadel.identity.context import sign_user_context
    from citadel.identity.keys import current_service_key

    settings = Wiring(config_path=config).config
    if ttl > settings.identity.max_ttl_s:
        _fail(f"--ttl {ttl} exceeds identity.max_ttl_s ({settings.identity.max_ttl_s}); the gateway would reject it")
    names = [g.strip() for g in groups.split(",") if g.strip()]
    try:
        key = current_service_key(settings.service_keys_path, service, create=True)
        signed = sign_user_context(key, tenant, user, names, ttl, settings.identity.audience, time.time())
    except ValueError as error:
        _fail(str(error))
    print(signed)


@credentials_app.command("add")
def credentials_add(
    name: str = typer.Argument(..., help="Service id."),
    tenants: str = typer.Option("", "--tenants", help="Comma-separated tenants the service may act for."),
    all_tenants: bool = typer.Option(False, "--all-tenants", help="Act for every tenant (with --admin: a platform admin)."),
    admin: bool = typer.Option(False, "--admin", help="May call the admin endpoints, in its tenants only."),
    expires_in: str = typer.Option("", "--expires-in", help="Lifetime, e.g. 3600, 90m, 12h or 30d (default: none)."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Create a bearer token for a service; it is printed once and only its SHA-256 is stored."""
    from citadel.identity.credentials import ALL_TENANTS, add_credential

    scope = [t.strip() for t in tenants.split(",") if t.strip()]
    if all_tenants == bool(scope):
        _fail("give either --tenants a,b or --all-tenants (every tenant is never the default)")
    expires_at = time.time() + _seconds(expires_in) if expires_in else None
    path = Wiring(config_path=config).config.credentials_path
    try:
        secret = add_credential(path, name, [ALL_TENANTS] if all_tenants else scope, admin=admin,
                                expires_at=expires_at)
    except ValueError as error:
        _fail(str(error))
    console.print(f"stored the SHA-256 of a new token for {name!r} in {path}; it is not shown again")
    print(secret)


@credentials_app.command("list")
def credentials_list(config: Optional[Path] = ConfigOption) -> None:
    """Service ids, tenants, admin flags, expiry and revocation, and a short hash fingerprint (never the full hash)."""
    from citadel.identity.credentials import fingerprint, read_credentials_file

    settings = Wiring(config_path=config).config
    sources = [("config", c) for c in settings.identity.services]
    sources += [("file", c) for c in read_credentials_file(settings.credentials_path)]
    print(json.dumps([{"id": c.id, "tenants": c.tenants, "admin": c.admin, "source": source,
                       "expires_at": c.expires_at, "revoked": c.revoked_at is not None,
                       "fingerprint": fingerprint(c)} for source, c in sources], indent=1))


@credentials_app.command("revoke")
def credentials_revoke(
    name: Optional[str] = typer.Argument(None, help="Service id: revoke every token of it."),
    fingerprint: str = typer.Option("", "--fingerprint", help="Revoke only the token with this fingerprint."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Revoke a service's tokens (all, or one by fingerprint); a running gateway refuses them at once."""
    from citadel.identity.credentials import fingerprint as fingerprint_of
    from citadel.identity.credentials import revoke_credentials

    path = Wiring(config_path=config).config.credentials_path
    try:
        revoked = revoke_credentials(path, name, fingerprint or None)
    except ValueError as error:
        _fail(str(error))
    if not revoked:
        _fail("no matching unrevoked credential in the credentials file (ones in the YAML config are removed there)")
    console.print(f"revoked {len(revoked)} credential(s) in {path}")
    print(json.dumps([{"id": c.id, "fingerprint": fingerprint_of(c)} for c in revoked]))


@credentials_app.command("rotate-key")
def credentials_rotate_key(
    service: str = typer.Argument(..., help="Service id whose user contexts the new key signs."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Add a new HS256 key for a service and print it once (kid and hex secret); new contexts use it,
    the older keys stay valid until `retire-key`."""
    from citadel.identity.keys import add_service_key

    path = Wiring(config_path=config).config.service_keys_path
    try:
        key = add_service_key(path, service)
    except ValueError as error:
        _fail(str(error))
    console.print(f"added key {key.kid} for {service!r} in {path}; older keys stay valid until retired")
    print(json.dumps({"service": key.service, "kid": key.kid, "secret": key.secret}))


@credentials_app.command("retire-key")
def credentials_retire_key(kid: str = typer.Argument(..., help="The kid to remove."),
                           config: Optional[Path] = ConfigOption) -> None:
    """Remove a signing key: contexts signed with it stop verifying."""
    from citadel.identity.keys import retire_service_key

    path = Wiring(config_path=config).config.service_keys_path
    if retire_service_key(path, kid) is None:
        _fail(f"no key {kid!r} in {path}")
    console.print(f"retired key {kid}")


def _seconds(duration: str) -> int:
    match = DURATION.match(duration.strip())
    if not match or int(match.group(1)) == 0:
        _fail(f"--expires-in {duration!r}: give a positive number with an optional s, m, h or d")
    return int(match.group(1)) * SECONDS_PER[match.group(2)]


def _fail(message: str, code: int = 2) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)
