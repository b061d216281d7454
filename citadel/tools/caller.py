"""Who a tool call is made as (DESIGN.md §10: tools act on behalf of the user, with a token the user's
identity provider issued for that tool's system, never one Citadel can mint for anyone).

`tools.delegation` picks how:
- `token_exchange` (the default): each call presents an access token the users' token service issued
  from the run's delegation (citadel/tools/delegation.py, RFC 8693), for the tool's system (`aud`)
  and the tool (`scope`). Citadel holds no key that can sign one; the token service refuses a user
  who has lost access.
- `local_test_hs256`: TEST ONLY. Citadel's tools service signs a short-lived context with its own
  HS256 key for whatever user the run names; whoever holds that key can act as anyone, so the CRM
  accepts this only when it, too, is told it runs a local test.

Either way the tools service keeps a credential (`tools.service_id`, its plaintext in the home's
secrets directory, made on first use): the client secret at the token service, or, in the test mode,
the bearer credential that relays the context.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from citadel.config import CitadelConfig
from citadel.identity.context import USER_CONTEXT_HEADER, sign_user_context
from citadel.identity.credentials import kept_token
from citadel.identity.keys import ServiceKey, current_service_key
from citadel.tools.delegation import DelegationStore, delegations_path
from citadel.tools.token_exchange import DelegationRefused, TokenExchangeClient, TokenServiceUnavailable
from citadel.types import Principal

IDEMPOTENCY_HEADER = "idempotency-key"


class ToolCaller(Protocol):
    def headers(self, principal: Principal, tool: str, audience: str, run_id: str | None,
                idempotency_key: str | None = None) -> dict[str, str]:
        """The credentials one call of `tool` on system `audience` carries, for `principal` in `run_id`
        (None: a read outside a step)."""


class TokenExchangeCaller:
    def __init__(self, client: TokenExchangeClient | None, store: DelegationStore):
        self.client, self.store = client, store

    def headers(self, principal: Principal, tool: str, audience: str, run_id: str | None,
                idempotency_key: str | None = None) -> dict[str, str]:
        if self.client is None:
            raise TokenServiceUnavailable("no token service is configured (tools.token_service_url)",
                                          code="token_service_not_configured")
        delegation = (self.store.for_run(run_id, audience) if run_id is not None
                      else self.store.newest_for_user(principal, audience, tool))
        if delegation is None or not delegation.acts_for(principal):
            raise DelegationRefused("this run holds no delegation from its user for that system")
        access = self.client.access_token(delegation.token, delegation.run_id, audience, tool)
        return _with_key({"authorization": f"Bearer {access.token}"}, idempotency_key)


@dataclass(frozen=True)
class LocalTestHs256Caller:
    """TEST ONLY (`tools.delegation: local_test_hs256`): a context for the run's user signed now with the
    tools service's own key."""

    service_id: str
    token: str
    key: ServiceKey
    audience: str
    ttl_s: int

    def headers(self, principal: Principal, tool: str, audience: str, run_id: str | None,
                idempotency_key: str | None = None) -> dict[str, str]:
        context = sign_user_context(self.key, principal.tenant_id, principal.user_id, sorted(principal.groups),
                                    self.ttl_s, self.audience, int(time.time()))
        return _with_key({"authorization": f"Bearer {self.token}", USER_CONTEXT_HEADER: context}, idempotency_key)


def _with_key(headers: dict[str, str], idempotency_key: str | None) -> dict[str, str]:
    return {**headers, IDEMPOTENCY_HEADER: idempotency_key} if idempotency_key is not None else headers


def tools_credential(config: CitadelConfig, tenants: list[str]) -> str:
    """The tools service's credential for `tenants` (made on first use), kept in the secrets directory."""
    service_id = config.tools.service_id
    return kept_token(config.credentials_path, Path(config.secrets_dir) / f"{service_id}.token", service_id, tenants)


def token_exchange_client(config: CitadelConfig, tenants: list[str]) -> TokenExchangeClient | None:
    tools = config.tools
    if tools.token_service_url is None:
        return None
    return TokenExchangeClient(tools.token_service_url, tools.service_id, tools_credential(config, tenants),
                               tools.timeout_s)


def tool_caller(config: CitadelConfig, tenants: list[str]) -> ToolCaller:
    """The tools' caller identity by `tools.delegation`; its credential for `tenants` is made first."""
    tools = config.tools
    token = tools_credential(config, tenants)
    if tools.delegation == "local_test_hs256":
        key = current_service_key(config.service_keys_path, tools.service_id, create=True)
        return LocalTestHs256Caller(tools.service_id, token, key, config.identity.audience, tools.user_context_ttl_s)
    return TokenExchangeCaller(token_exchange_client(config, tenants), DelegationStore(delegations_path(config)))
