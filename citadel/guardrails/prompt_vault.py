"""Prompts kept for investigation: what the generator was sent and what it returned, encrypted at rest.

A wrong answer is investigated from its prompt, but a prompt holds the user's question word for word
(contact details and all), so it is never stored in the clear: `PromptVault.put` encrypts the prompt
and the reply with AES-256-GCM (`cryptography`'s AESGCM) under the newest key of the keyring
(citadel/guardrails/prompt_keys.py) and hands the store only the kid, a fresh 96-bit nonce and the
ciphertext. The request id, tenant, user and kid are the additional authenticated data, so a
ciphertext moved to another request's row fails to decrypt rather than answering for it.

The store is the catalog (`prompt_vault` table, SQLite and Postgres: `PromptStore` below). Records
expire after `answer.prompt_retention_days`, purged with the answer log (citadel/catalog/retention.py).
Reading one is for platform admins and is audited by the caller (serving/services/admin.py, the CLI's
`citadel logs show`); this module only encrypts, decrypts and forgets.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from citadel.errors import PromptUnreadable
from citadel.guardrails.prompt_keys import PromptKeyring

NONCE_BYTES = 12  # the GCM standard nonce; random per record (2^-32 collision odds only after ~2^32 records)
SECONDS_PER_DAY = 86_400.0


@runtime_checkable
class PromptStore(Protocol):
    """Where the ciphertext goes (both catalogs implement it)."""

    def keep_prompt(self, request_id: str, tenant_id: str, user_id: str, kid: str, nonce: bytes,
                    ciphertext: bytes) -> None: ...
    def kept_prompt(self, request_id: str) -> dict[str, Any] | None: ...
    def purge_prompts(self, older_than_s: float) -> int: ...


@dataclass(frozen=True)
class KeptPrompt:
    request_id: str
    tenant_id: str
    user_id: str
    ts: float
    kid: str
    prompt: Any  # the chat messages the generator was sent (a list of {role, content})
    reply: str

    def to_dict(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "tenant_id": self.tenant_id, "user_id": self.user_id,
                "ts": self.ts, "kid": self.kid, "prompt": self.prompt, "reply": self.reply}


class PromptVault:
    def __init__(self, store: PromptStore, keyring: PromptKeyring):
        self._store = store
        self._keyring = keyring

    def put(self, request_id: str, tenant: str, user: str, prompt: Any, reply: str) -> None:
        """Encrypt and keep one request's prompt and reply (under the newest kid)."""
        kid = self._keyring.current
        nonce = os.urandom(NONCE_BYTES)
        plaintext = json.dumps({"prompt": prompt, "reply": reply}, ensure_ascii=False).encode("utf-8")
        ciphertext = AESGCM(self._keyring.key(kid)).encrypt(nonce, plaintext, _bound(request_id, tenant, user, kid))
        self._store.keep_prompt(request_id, tenant, user, kid, nonce, ciphertext)

    def get(self, request_id: str) -> KeptPrompt | None:
        """The request's kept prompt, decrypted with the kid it was written under (None: none kept)."""
        row = self._store.kept_prompt(request_id)
        if row is None:
            return None
        kid = row["kid"]
        try:
            plaintext = AESGCM(self._keyring.key(kid)).decrypt(
                row["nonce"], row["ciphertext"], _bound(request_id, row["tenant_id"], row["user_id"], kid))
        except InvalidTag:
            raise PromptUnreadable("the kept prompt does not decrypt with its key") from None
        record = json.loads(plaintext)
        return KeptPrompt(request_id, row["tenant_id"], row["user_id"], float(row["ts"]), kid, record["prompt"],
                          record["reply"])

    def purge(self, older_than: float) -> int:
        """Forget the records older than `older_than` seconds; returns how many went."""
        return int(self._store.purge_prompts(older_than))


def retention_s(days: float) -> float:
    return float(days) * SECONDS_PER_DAY


def _bound(request_id: str, tenant: str, user: str, kid: str) -> bytes:
    """The additional authenticated data: what the ciphertext belongs to."""
    return json.dumps([request_id, tenant, user, kid]).encode("utf-8")


PROMPT_READ = "prompt_read"


def read_audited(vault: PromptVault, catalog, actor: str, request_id: str, via: str) -> KeptPrompt | None:
    """A kept prompt for a platform admin (the caller checked who `actor` is), with the read written
    to the catalog's append-only audit log first (who, when, which request, whose): a read that
    cannot be audited returns nothing."""
    kept = vault.get(request_id)
    if kept is not None:
        catalog.audit(actor, PROMPT_READ, kept.tenant_id, request_id, {"user_id": kept.user_id, "via": via})
    return kept
