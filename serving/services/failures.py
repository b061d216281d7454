"""How a failing store looks to a caller: a code and a generic message, the details in the server log.

The permission store (the catalog and the live check) fails closed: any failure inside
`failing_closed()` is a 503 `permissions_unavailable`, never a 500 and never an unchecked passage.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

from citadel.errors import CatalogUnavailable, EmbeddingModelMismatch, PermissionsUnavailable, Unavailable

log = logging.getLogger(__name__)

# Failures of the permission store: the request fails closed (503), never with unchecked passages.
PERMISSION_STORE_ERRORS = (CatalogUnavailable, PermissionsUnavailable, OSError)


@contextmanager
def failing_closed() -> Iterator[None]:
    try:
        yield
    except PERMISSION_STORE_ERRORS as error:
        raise unavailable("permissions_unavailable", "the permission store", error) from None
    except EmbeddingModelMismatch as error:  # the tenant awaits re-embedding: a clear 503, never a 500
        log.warning("refused a search across embedding models: %s", error)  # the details stay in the log
        raise EmbeddingModelMismatch("this tenant's index was embedded with another model than the queries and is "
                                     "not searched until it is re-embedded (`citadel reembed`)") from None


def unavailable(code: str, store: str, error: BaseException) -> Unavailable:
    """The error a caller sees when a store fails. The details (a Redis host:port, a database
    message or path) go to the server log only, under the code."""
    log.warning("%s: %s unavailable: %s: %s", code, store, type(error).__name__, error)
    return Unavailable(f"{store} is unavailable; try again shortly", code=code)
