"""The client side of OAuth 2.0 Token Exchange (RFC 8693) at the users' token service (DESIGN.md §10).

Citadel authenticates as a client (`tools.service_id`, its credential as the client secret, HTTP Basic)
and asks for two things:
- `delegate`: the user's own context (as the gateway verified it) for a delegation bound to one run,
  one system and the tools named — what a run holds while it waits for an approval;
- `access_token`: that delegation for a five-minute access token for one system and one tool — what
  each tool call presents.
The token service decides: it refuses a subject it cannot verify, one the client made itself, and any
user who has lost access. Its refusal is `DelegationRefused` (the run records it; no call is made);
its absence is `TokenServiceUnavailable`. Neither carries the service's URL or its error text.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass

import httpx

from citadel.errors import DelegationRefused, TokenServiceUnavailable
from citadel.resilience.deadline import time_left

log = logging.getLogger(__name__)

GRANT_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
REFRESH_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:refresh_token"
MAX_RESPONSE_BYTES = 64 * 1024
MAX_TOKEN_CHARS = 32 * 1024
OAUTH_ERROR = re.compile(r"^[a-z_]{1,40}$")  # RFC 6749 §5.2 codes; anything else is not repeated


@dataclass(frozen=True)
class IssuedToken:
    token: str
    expires_at: float
    scopes: tuple[str, ...]


class TokenExchangeClient:
    def __init__(self, url: str, client_id: str, client_secret: str, timeout_s: float,
                 client: httpx.Client | None = None, clock=time.time):
        self.token_url = url.rstrip("/") + "/token"
        self._auth = (client_id, client_secret)
        self.timeout_s = timeout_s
        self._client = client or httpx.Client(follow_redirects=False)
        self._clock = clock

    def delegate(self, subject_token: str, run_id: str, audience: str, scopes: list[str],
                 expires_in: int) -> IssuedToken:
        """A delegation for `run_id` on `audience` covering `scopes`, from the user's own context."""
        return self._exchange({"subject_token": subject_token, "subject_token_type": JWT_TYPE,
                               "requested_token_type": REFRESH_TOKEN_TYPE, "audience": audience,
                               "scope": " ".join(sorted(scopes)), "run_id": run_id, "expires_in": str(int(expires_in))})

    def access_token(self, delegation: str, run_id: str, audience: str, scope: str) -> IssuedToken:
        """A short-lived access token for one tool (`scope`) on one system, from a run's delegation."""
        return self._exchange({"subject_token": delegation, "subject_token_type": REFRESH_TOKEN_TYPE,
                               "requested_token_type": ACCESS_TOKEN_TYPE, "audience": audience, "scope": scope,
                               "run_id": run_id})

    def _exchange(self, fields: dict[str, str]) -> IssuedToken:
        try:
            response = self._client.post(self.token_url, data={"grant_type": GRANT_TOKEN_EXCHANGE, **fields},
                                         auth=self._auth, timeout=time_left(self.timeout_s))
        except httpx.HTTPError as error:
            log.warning("token service unreachable: %s", error)
            raise TokenServiceUnavailable("the token service could not be reached") from None
        body = _json(response)
        if response.status_code >= 500 or response.status_code == 401:
            # 401: this deployment's own client credential was refused — a setup fault, not the user's
            log.warning("token service answered %d: %s", response.status_code, body.get("error"))
            raise TokenServiceUnavailable(f"the token service failed (status {response.status_code})")
        if response.status_code >= 400:
            reason = body.get("error")
            reason = reason if isinstance(reason, str) and OAUTH_ERROR.match(reason) else "refused"
            raise DelegationRefused(f"the token service refused to act for this user ({reason})")
        token, expires_in = body.get("access_token"), body.get("expires_in")
        if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN_CHARS or not isinstance(expires_in, int):
            raise TokenServiceUnavailable("the token service answered without a usable token")
        return IssuedToken(token, self._clock() + expires_in, tuple(str(body.get("scope", "")).split()))


def _json(response: httpx.Response) -> dict:
    if len(response.content) > MAX_RESPONSE_BYTES:
        return {}
    try:
        body = json.loads(response.content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
