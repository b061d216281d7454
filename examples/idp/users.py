"""Who has lost access: the token service's own record of revoked users, `<home>/idp/revoked.json`.

In a real deployment this is the identity provider's user directory (an account disabled, a person
who left). Every exchange consults it, so a delegation a run holds stops yielding access tokens the
moment its user is revoked, however long the run waited for its approval.
"""

from __future__ import annotations

import json
from pathlib import Path

from citadel.identity.base import locked, replace_secret_file

MAX_REVOKED = 100_000  # a bigger file is a bug or an attack, not a staff list
MAX_FILE_BYTES = 16 * 1024 * 1024


def revoked_path(home: Path) -> Path:
    return Path(home) / "idp" / "revoked.json"


def _read(path: Path) -> set[tuple[str, str]]:
    """The revoked (tenant, user) pairs. A file that cannot be read revokes everyone (fail closed)."""
    if not path.exists():
        return set()
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError("revocations file too large")
    entries = json.loads(path.read_text())["revoked"]
    return {(str(e["tenant"]), str(e["user"])) for e in entries[:MAX_REVOKED]}


def is_revoked(home: Path, tenant: str, user: str) -> bool:
    try:
        return (tenant, user) in _read(revoked_path(home))
    except (OSError, ValueError, KeyError, TypeError):
        return True


def revoke(home: Path, tenant: str, user: str) -> None:
    path = revoked_path(home)
    with locked(path):
        revoked = _read(path) | {(tenant, user)}
        if len(revoked) > MAX_REVOKED:
            raise ValueError(f"at most {MAX_REVOKED:,} revoked users")
        body = {"revoked": [{"tenant": t, "user": u} for t, u in sorted(revoked)]}
        replace_secret_file(path, json.dumps(body, indent=1) + "\n")


def restore(home: Path, tenant: str, user: str) -> None:
    path = revoked_path(home)
    with locked(path):
        body = {"revoked": [{"tenant": t, "user": u} for t, u in sorted(_read(path) - {(tenant, user)})]}
        replace_secret_file(path, json.dumps(body, indent=1) + "\n")
