"""`GET /metrics` is for a metrics credential only (`serving.metrics_tokens_sha256`): a bearer token
of its own, so a scraper holds no service's power and a service cannot read other tenants' traffic.
The counters themselves are serving/services/metrics.py."""

from __future__ import annotations

import hmac
from typing import Iterable

from citadel.errors import Unauthenticated
from citadel.identity.credentials import bearer_digest

# Longest Authorization header worth hashing (a metrics token is 64 hex characters).
MAX_CREDENTIAL_CHARS = 1_024


def require_metrics_credential(authorization: str | None, allowed_sha256: Iterable[str]) -> None:
    """401 unless `authorization` is `Bearer <token>` whose SHA-256 is one of `allowed_sha256`
    (none configured: nobody may read the metrics)."""
    digest = bearer_digest(authorization, max_chars=MAX_CREDENTIAL_CHARS)
    matched = False
    for allowed in allowed_sha256:  # no early exit: timing does not reveal which entry matched
        matched |= hmac.compare_digest(allowed.lower(), digest)
    if not matched:
        raise Unauthenticated("not a metrics credential", code="invalid_credential")
