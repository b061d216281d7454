"""Who a tool call is made as (DESIGN.md §10: tools act on behalf of the user; no service superuser).

A run can wait hours for an approval, and the user's own signed context is bound to the app that
signed it and expires within minutes, so it cannot be carried to the target system. Instead the tool
runner holds its own service credential (`tools.service_id`) and, just before each call, signs a fresh
short-lived user context for the run's user — the same tenant, user and groups the run was started
with — with that service's key. The target system verifies it like any caller's context and applies
the user's permissions: it never sees a credential that can act for anyone.

The credential is created on first use; its plaintext token is kept in the home's secrets directory
(`kept_token`, as the local launcher keeps the local app's).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from citadel.config import CitadelConfig
from citadel.identity.context import sign_user_context
from citadel.identity.credentials import kept_token
from citadel.identity.keys import ServiceKey, current_service_key
from citadel.types import Principal


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
    token_file = Path(config.secrets_dir) / f"{tools.service_id}.token"
    token = kept_token(config.credentials_path, token_file, tools.service_id, tenants)
    return ToolCaller(tools.service_id, token, key, config.identity.audience, tools.user_context_ttl_s)
