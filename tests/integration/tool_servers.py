"""The example deployment's tool side on loopback, for tests: the users' token service (examples/idp)
and the CRM (examples/crm), started for a home and stopped after; and what the runs service does when
a message starts a run — the user's own context exchanged for the run's delegation."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Iterator

from citadel.config import CitadelConfig
from citadel.identity.context import sign_user_context
from citadel.identity.credentials import ALL_TENANTS
from citadel.identity.keys import current_service_key
from citadel.tools.caller import tool_caller
from citadel.types import Principal
from examples.crm.launcher import start_crm, stop_crm
from examples.idp.launcher import start_idp, stop_idp

APP = "app"  # the app users sign in to: it signs their contexts with its own key (tests/integration/conftest.py)


@contextlib.contextmanager
def tool_servers(config: CitadelConfig) -> Iterator[CitadelConfig]:
    """Token service first (the CRM verifies its JWKS), then the CRM; `config` points at both."""
    home = Path(config.home)
    tool_caller(config, [ALL_TENANTS])  # the tools' credential exists before the servers read the home
    current_service_key(config.service_keys_path, APP, create=True)
    try:
        if config.tools.delegation == "token_exchange":
            config.tools.token_service_url = start_idp(home).url
        config.tools.endpoints = {"crm": start_crm(home).url}
        yield config
    finally:
        stop_crm(home)
        stop_idp(home)


def user_context(config: CitadelConfig, tenant: str, user: str, groups) -> str:
    key = current_service_key(config.service_keys_path, APP, create=True)
    return sign_user_context(key, tenant, user, list(groups), 300, config.identity.audience, int(time.time()))


def delegate_run(wiring, run_id: str, tenant: str, user: str, groups) -> None:
    """As `RunsService.post_message` does for a run it creates (a test that makes its runs itself)."""
    if wiring.run_delegator is not None:
        wiring.run_delegator.start_run(run_id, Principal(tenant, user, frozenset(groups)),
                                       user_context(wiring.config, tenant, user, groups))
