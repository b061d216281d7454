"""The optional webhook a decision calls: the requester's app is not blocked while
a person decides, and learns of the decision from the run's event — or, when `tools.decision_webhook`
names a URL, from a POST to it. The body names only ids and the outcome (never arguments or a
comment): the app reads the rest from the API with its own credentials. Delivery is best effort, off
the request's thread, one attempt with a short timeout; a failure is logged and never undoes or
delays the decision."""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any

import httpx

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_S = 5.0


class DecisionWebhook:
    def __init__(self, url: str, timeout_s: float = WEBHOOK_TIMEOUT_S, client: httpx.Client | None = None):
        self.url = url
        self.timeout_s = timeout_s
        self._client = client or httpx.Client(follow_redirects=False)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="decision-webhook")

    def send(self, payload: dict[str, Any]) -> concurrent.futures.Future:
        return self._pool.submit(self._post, payload)

    def _post(self, payload: dict[str, Any]) -> bool:
        try:
            response = self._client.post(self.url, json=payload, timeout=self.timeout_s)
        except httpx.HTTPError as error:
            log.warning("decision webhook for %s failed: %s", payload.get("approval_id"), type(error).__name__)
            return False
        if response.status_code >= 300:
            log.warning("decision webhook for %s answered %d", payload.get("approval_id"), response.status_code)
            return False
        return True

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._client.close()
