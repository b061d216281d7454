"""Serving-state interfaces (answer cache, budgets, idempotency) shared by the Redis and in-process backends.

DESIGN.md §7: both backends implement these Protocols and pass one conformance suite. Every method is
synchronous (callers run them in threads) and takes time from an injected clock, so TTLs and UTC days are
testable without sleeping. The pure helpers here hold the semantics both backends must agree on.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Callable, Iterable, Protocol, runtime_checkable

from citadel.config import StateConfig
from citadel.errors import StateUnavailable

Clock = Callable[[], float]

SECONDS_PER_DAY = 86_400
# Costs are counted in integer millionths so both backends add exactly (no float drift at the limit).
COST_SCALE = 1_000_000
# Bumped whenever question normalisation or the hashed material changes, so stale keys simply miss.
CACHE_KEY_VERSION = "v2"  # v2: the ACL signature hashes a JSON list of groups, not a comma join
_TRAILING_PUNCTUATION = "?!."
_WHITESPACE = re.compile(r"\s+")


class IdempotencyStatus(StrEnum):
    """What `IdempotencyStore.begin` found. A str enum (StrEnum: a str and an Enum whose str() is
    its value) holding the strings stored and logged before it existed, so JSON, f-strings and
    comparisons with those strings stay as they were."""

    NEW = "new"  # reserved now: run the request, then complete (or release) the key
    IN_PROGRESS = "in_progress"  # the same request is running elsewhere
    DONE = "done"  # finished: replay the stored response
    CONFLICT = "conflict"  # the key was used with a different request


@dataclass(frozen=True)
class BudgetDecision:
    """Outcome of one charge: counters are after the charge when allowed, unchanged when refused."""

    allowed: bool
    reason: str | None
    requests_used: int
    cost_used: float
    retry_after_s: float


@dataclass(frozen=True)
class IdempotencyResult:
    """`response`/`status_code` are set only for DONE."""

    status: IdempotencyStatus
    response: dict[str, Any] | None = None
    status_code: int | None = None


@runtime_checkable
class AnswerCache(Protocol):
    """JSON dicts under a key from `answer_cache_key`, expiring after a TTL, dropped per document or
    tenant when what they were built from changes. Failures raise StateUnavailable."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any], tenant_id: str, document_ids: Iterable[str]) -> None: ...

    def invalidate_documents(self, tenant_id: str, document_ids: Iterable[str]) -> int: ...

    def invalidate_tenant(self, tenant_id: str) -> int: ...


@runtime_checkable
class BudgetStore(Protocol):
    """Per tenant and user, per UTC day: a charge that would pass a limit is refused and charges
    nothing. Failures raise StateUnavailable (callers fail closed)."""

    def charge(self, tenant_id: str, user_id: str, requests: int = 1, cost: float = 0.0) -> BudgetDecision: ...

    def usage(self, tenant_id: str, user_id: str) -> tuple[int, float]: ...


@runtime_checkable
class IdempotencyStore(Protocol):
    """One reservation per (scope, key): `begin` reserves or reports, `complete` stores the response
    for replays, `release` drops a reservation whose request failed. Failures raise StateUnavailable."""

    def begin(self, scope: str, key: str, fingerprint: str) -> IdempotencyResult: ...

    def complete(self, scope: str, key: str, response: dict[str, Any], status_code: int) -> bool: ...

    def release(self, scope: str, key: str) -> None: ...


def normalise_question(question: str) -> str:
    """Casefold, collapse whitespace and drop trailing ?!. so trivially different phrasings share an entry."""
    text = _WHITESPACE.sub(" ", question.casefold()).strip()
    return text.rstrip(_TRAILING_PUNCTUATION + " ")


def answer_cache_key(tenant_id: str, acl_signature: str, question: str, source_versions: str,
                     bundle_id: str | None = None) -> str:
    """SHA-256 over everything that can change an answer: a new ACL, published version or config
    bundle (citadel/quality/bundle.py: prompts, models, gate settings) is a new key.

    The material is a JSON list, a canonical encoding: no field's content can imitate a separator, so
    two different (tenant, signature, question, versions, bundle) never hash the same material."""
    material = json.dumps([CACHE_KEY_VERSION, tenant_id, acl_signature, normalise_question(question), source_versions,
                           bundle_id or ""])
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def encode_value(value: dict[str, Any]) -> str:
    """Both backends store JSON text, so a cached value round-trips identically (and fails early if not JSON)."""
    if not isinstance(value, dict):
        raise TypeError(f"cached values must be dicts, got {type(value).__name__}")
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def utc_day(now: float) -> int:
    return math.floor(now / SECONDS_PER_DAY)


def seconds_until_next_day(now: float) -> float:
    return (utc_day(now) + 1) * SECONDS_PER_DAY - now


def to_cost_units(cost: float) -> int:
    return round(cost * COST_SCALE)


def validate_charge(requests: int, cost: float) -> None:
    if requests < 0 or cost < 0 or not math.isfinite(cost):
        raise ValueError(f"charges must be non-negative and finite (requests={requests}, cost={cost})")


def request_budget_reason(config: StateConfig) -> str:
    return f"daily request budget of {config.budget_requests_per_day} requests exhausted"


def cost_budget_reason(config: StateConfig) -> str:
    return f"daily cost budget of {config.budget_cost_per_day:.2f} {config.cost_unit} exhausted"


def budget_decision(
    config: StateConfig, now: float, refusal: str | None, requests_used: int, cost_units_used: int
) -> BudgetDecision:
    """Build the decision; a refusal tells the caller to come back when the UTC day rolls over."""
    return BudgetDecision(
        allowed=refusal is None,
        reason=refusal,
        requests_used=requests_used,
        cost_used=cost_units_used / COST_SCALE,
        retry_after_s=0.0 if refusal is None else seconds_until_next_day(now),
    )


def budget_refusal(
    config: StateConfig, requests_used: int, cost_units_used: int, requests: int, cost_units: int
) -> str | None:
    """Refuse a charge that would take either counter past its limit (so usage never exceeds a limit)."""
    if requests_used + requests > config.budget_requests_per_day:
        return request_budget_reason(config)
    if cost_units_used + cost_units > to_cost_units(config.budget_cost_per_day):
        return cost_budget_reason(config)
    return None
