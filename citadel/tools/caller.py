"""Who a tool call is made as (DESIGN.md §10: tools act on behalf of the user; no service superuser).

A run can wait hours for an approval, and the user's own signed context is bound to the app that
signed it and expires within minutes, so it cannot be carried to the target system. Instead the tool
runner holds its own service credential (`tools.service_id`) and, just before each call, signs a fresh
short-lived user context for the run's user — the same tenant, user and groups the run was started
with — with that service's key. The target system verifies it like any caller's context and applies
the user's permissions: it never sees a credential that can act for anyone.

The credential is created on first use; its plaintext token is kept in the home's secrets directory
(mode 0600), as the local launcher keeps the local app's.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from citadel.config import CitadelConfig
from citadel.identity.context import sign_user_context
from citadel.identity.credentials import add_credential, read_credentials_file
from citadel.identity.keys import ServiceKey, current_service_key
from citadel.types import Principal

SECRET_MODE = 0o600


@dataclass(frozen=True)
class ToolCaller:
    service_id: str
    token: str
    key: ServiceKey
    audience: str
    ttl_s: int

    def headers(self, principal: Principal, idempotency_key: str | None = None) -> dict[str, str]:
        """The call's credentials: this service's token and a context for `principal` signed now."""
        context = sign_user_context(self.key, principal.tenant_id, principal.user_id, sorted(principal.groups),
                                    self.ttl_s, self.audience, int(time.time()))
        headers = {"authorization": f"Bearer {self.token}", "x-citadel-user-context": context}
        if idempotency_key is not None:
            headers["idempotency-key"] = idempotency_key
        return headers


def tool_caller(config: CitadelConfig, tenants: list[str]) -> ToolCaller:
    """The tools' caller identity: its signing key and a credential for `tenants`, made on first use."""
    tools = config.tools
    key = current_service_key(config.service_keys_path, tools.service_id, create=True)
    return ToolCaller(tools.service_id, _token(config, tenants), key, config.identity.audience,
                      tools.user_context_ttl_s)


def _token(config: CitadelConfig, tenants: list[str]) -> str:
    path = Path(config.secrets_dir) / f"{config.tools.service_id}.token"
    known = {c.id for c in read_credentials_file(config.credentials_path)}
    if path.exists() and config.tools.service_id in known:
        return path.read_text().strip()
    token = add_credential(config.credentials_path, config.tools.service_id, tenants)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SECRET_MODE)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token)
    return token
