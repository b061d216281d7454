"""A registered tool called over HTTP (its spec's `http` binding; DESIGN.md §10).

The call acts for the run's user (`ToolCaller`: an access token the users' token service issued from
the run's delegation, for this tool's system and this tool; citadel/tools/caller.py) and carries
the step's idempotency key, derived from run and step (`<run_id>:<step_id>`), in an `idempotency-key`
header and in the body field the binding names, where the target system stores it. A write whose
binding has a `lookup_path` first asks for the record that key made: a step repeated after a crash
(the system created the record, the process died before the step was recorded) finds it and does not
create a second one. The target's own uniqueness on that field backs this up when two attempts race.

What leaves: the target's JSON, bounded in size, as `{"result": …}`. What never leaves: its error
text, URLs or addresses — a failure is `tool_call_failed` (unreachable, 5xx) or `tool_call_refused`
(a 4xx: the target said no), with the status only; the server log has the rest.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Mapping
from typing import Any

import httpx

from citadel.errors import CitadelError, InvalidToolArguments, ToolCallFailed, ToolCallRefused
from citadel.resilience.deadline import time_left
from citadel.tools.caller import ToolCaller
from citadel.tools.schema import problems, validator_for
from citadel.tools.spec import KEY_PLACEHOLDER, PATH_PLACEHOLDER, RiskTier, ToolSpec
from citadel.types import Principal

log = logging.getLogger(__name__)


class HttpTool:
    """The Tool protocol (citadel/tools/registry.py) over a spec's HTTP binding."""

    def __init__(self, spec: ToolSpec, base_url: str, caller: ToolCaller, timeout_s: float, max_response_bytes: int,
                 client: httpx.Client | None = None):
        if spec.http is None:
            raise ValueError(f"tool {spec.name!r} has no http binding")
        self.spec = spec
        self.name = spec.name
        self.tier = RiskTier(spec.risk_tier)
        self.base_url = base_url.rstrip("/")
        self.caller = caller
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self._client = client or httpx.Client(follow_redirects=False)
        self._validator = validator_for(spec.args_schema)

    def arguments(self, ask: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """The step's arguments, checked against the tool's schema (the ask adds nothing: a tool that
        acts takes only explicit arguments)."""
        found = problems(self._validator, dict(args), "arguments")
        if found:
            raise InvalidToolArguments(f"{self.name}: " + "; ".join(found))
        return dict(args)

    def run(self, principal: Principal, arguments: Mapping[str, Any], request_id: str) -> dict[str, Any]:
        binding = self.spec.http
        writes = self.tier is not RiskTier.T0
        headers = self.caller.headers(principal, self.name, binding.endpoint, run_of(request_id),
                                      request_id if writes else None)
        if writes and binding.lookup_path:
            earlier = self._request("GET", _filled(binding.lookup_path, {KEY_PLACEHOLDER: request_id}), headers,
                                    missing_ok=True)
            if earlier is not None:
                return {"result": earlier, "repeated": True}
        rest = {k: v for k, v in arguments.items() if k not in binding.placeholders()}
        path = _filled(binding.path, arguments)
        if binding.method == "GET":
            return {"result": self._request("GET", path, headers, params=rest)}
        body = {**rest, binding.idempotency_field: request_id} if binding.idempotency_field else rest
        return {"result": self._request("POST", path, headers, body=body)}

    def current(self, principal: Principal, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
        """The record this call would change, as the user may read it now (the binding's `current_path`),
        or None: no such path, no record (404), or the system could not say (a reviewer then sees the
        proposal alone; nothing depends on it)."""
        binding = self.spec.http
        if not binding.current_path:
            return None
        try:
            found = self._request("GET", _filled(binding.current_path, arguments),
                                  self.caller.headers(principal, self.name, binding.endpoint, None), missing_ok=True)
        except (CitadelError, KeyError):  # the call failed or was refused, or no token could be had
            return None
        return found if isinstance(found, dict) else None

    def _request(self, method: str, path: str, headers: dict[str, str], params: Mapping[str, Any] | None = None,
                 body: Mapping[str, Any] | None = None, missing_ok: bool = False) -> Any:
        url = f"{self.base_url}{path}"
        try:
            # At most its own timeout, and never past the run's deadline (citadel.resilience.deadline).
            response = self._client.request(method, url, headers=headers, params=params, json=body,
                                            timeout=time_left(self.timeout_s))
        except httpx.HTTPError as error:
            log.warning("tool %s: %s %s failed: %s", self.name, method, path, error)
            raise ToolCallFailed(f"{self.name} could not be reached") from None
        if missing_ok and response.status_code == 404:
            return None
        if response.status_code >= 500:
            log.warning("tool %s: %s %s → %d", self.name, method, path, response.status_code)
            raise ToolCallFailed(f"{self.name} failed (status {response.status_code})")
        if response.status_code >= 400:
            raise ToolCallRefused(f"{self.name} refused the call (status {response.status_code})")
        if len(response.content) > self.max_response_bytes:
            raise ToolCallFailed(f"{self.name} answered with more than {self.max_response_bytes:,} bytes")
        try:
            return json.loads(response.content)
        except ValueError:
            raise ToolCallFailed(f"{self.name} did not answer with JSON") from None


def run_of(request_id: str) -> str:
    """The run of a step's request id (`<run_id>:<step_id>`, citadel/agent/executor.py; run ids hold no ':')."""
    return request_id.split(":", 1)[0]


def _filled(path: str, values: Mapping[str, Any]) -> str:
    """A path with each "{name}" replaced by its value, URL-quoted (nothing can add a segment)."""
    return PATH_PLACEHOLDER.sub(lambda m: urllib.parse.quote(str(values[m.group(1)]), safe=""), path)
