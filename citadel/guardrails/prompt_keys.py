"""The keys that encrypt kept prompts (citadel/guardrails/prompt_vault.py), by key id (kid).

Two sources, the first that is set wins:
- an environment variable (`answer.prompt_key_env`, default CITADEL_PROMPT_KEYS), as a KMS or a
  secret store injects it: `kid:base64key[,kid:base64key...]`, the newest last;
- a keys file in the home's secrets directory (`<home>/secrets/prompt_keys.json`), created with a
  first key on first use, readable by its owner only (0600).
New records are encrypted with the newest kid; each record names its kid, so older records still
decrypt after a rotation (`rotate_file_key` appends a new key and keeps the old ones). Keys are
AES-256 (32 random bytes).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from citadel.errors import PromptKeysUnavailable

KEY_BYTES = 32
KEYS_FILE_NAME = "prompt_keys.json"
DEFAULT_KEY_ENV = "CITADEL_PROMPT_KEYS"
_OWNER_ONLY = 0o600


@dataclass(frozen=True)
class PromptKeyring:
    """Keys by kid, and the kid new records are written with."""

    keys: dict[str, bytes]
    current: str

    def key(self, kid: str) -> bytes:
        try:
            return self.keys[kid]
        except KeyError:
            raise PromptKeysUnavailable(f"no prompt key with kid {kid!r}") from None


def keyring_from_env(value: str) -> PromptKeyring:
    """`kid:base64key[,kid:base64key...]`, the newest last."""
    keys: dict[str, bytes] = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        kid, _, encoded = entry.partition(":")
        keys[kid.strip()] = _decoded(kid.strip(), encoded.strip())
    if not keys:
        raise PromptKeysUnavailable("the prompt key variable holds no key")
    return PromptKeyring(keys, list(keys)[-1])


def keyring_from_file(path: Path, create: bool = True) -> PromptKeyring:
    """The keys file's keys (created with a first key when missing and `create`)."""
    path = Path(path)
    if not path.exists():
        if not create:
            raise PromptKeysUnavailable("no prompt keys file")
        return rotate_file_key(path)
    try:
        entries = json.loads(path.read_text())["keys"]
        keys = {entry["kid"]: _decoded(entry["kid"], entry["key"]) for entry in entries}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise PromptKeysUnavailable(f"the prompt keys file is unreadable ({type(error).__name__})") from None
    if not keys:
        raise PromptKeysUnavailable("the prompt keys file holds no key")
    return PromptKeyring(keys, entries[-1]["kid"])


def rotate_file_key(path: Path) -> PromptKeyring:
    """Append a new key (the new current kid) to the keys file, creating it owner-only; old keys stay."""
    path = Path(path)
    entries = json.loads(path.read_text())["keys"] if path.exists() else []
    kid = f"pk-{time.strftime('%Y%m%d', time.gmtime())}-{secrets.token_hex(4)}"
    entries.append({"kid": kid, "key": base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode(),
                    "created_at": time.time()})
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _OWNER_ONLY)
    with os.fdopen(descriptor, "w") as out:
        json.dump({"keys": entries}, out, indent=1)
    os.chmod(temporary, _OWNER_ONLY)
    os.replace(temporary, path)  # readers see the old file or the new one, never half of one
    return keyring_from_file(path, create=False)


def keyring_for(secrets_dir: Path, key_env: str = DEFAULT_KEY_ENV, environ: dict[str, str] | None = None) -> PromptKeyring:
    """The environment's keys when `key_env` is set, else the home's keys file (made on first use)."""
    value = (os.environ if environ is None else environ).get(key_env, "")
    if value.strip():
        return keyring_from_env(value)
    return keyring_from_file(Path(secrets_dir) / KEYS_FILE_NAME)


def _decoded(kid: str, encoded: str) -> bytes:
    if not kid:
        raise PromptKeysUnavailable("a prompt key has no kid")
    try:
        key = base64.b64decode(encoded, validate=True)
    except ValueError:
        raise PromptKeysUnavailable(f"prompt key {kid!r} is not base64") from None
    if len(key) != KEY_BYTES:
        raise PromptKeysUnavailable(f"prompt key {kid!r} is not {KEY_BYTES} bytes")
    return key
