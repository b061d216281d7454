"""The Redis client and key helpers every Redis store shares (state, runs): a lazily connecting client
with short timeouts and one retry, the mapping of unreachable Redis to StateUnavailable, ids quoted
inside keys, and PX expiries."""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from citadel.state.base import StateUnavailable

# Short, so a dead Redis costs a request half a second rather than the client default of seconds.
SOCKET_TIMEOUT_S = 0.5
# One retry absorbs a pooled connection the server closed (restart, idle timeout) without hiding an outage.
CONNECTION_RETRIES = 1
_MS_PER_S = 1000


def connect(url: str, socket_timeout_s: float = SOCKET_TIMEOUT_S) -> redis.Redis:
    """A lazily connecting client: nothing is contacted until the first command."""
    return redis.Redis.from_url(
        url,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=socket_timeout_s,
        retry=Retry(NoBackoff(), CONNECTION_RETRIES),
        decode_responses=True,
    )


@contextmanager
def reachable() -> Iterator[None]:
    """A connection or timeout error inside the block becomes StateUnavailable."""
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise StateUnavailable(f"redis is unreachable: {exc}") from exc


def key_part(value: str) -> str:
    """An id percent-quoted for a key, so a ':' in a tenant or user id cannot collide with another key."""
    return quote(value, safe="")


def ttl_ms(seconds: float) -> int:
    """A PX expiry: whole milliseconds, at least one."""
    return max(1, math.ceil(seconds * _MS_PER_S))
