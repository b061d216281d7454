"""The error tree (DESIGN.md §2): every error carries a machine-readable `code` and the HTTP status
an API reports it with, so the CLI, the HTTP layer and job reports show a reason without a table of
codes beside the classes.

A family class fixes the status (Unauthenticated is always 401); an instance may name a finer code
within it (`Unauthenticated(..., code="expired_user_context")`). Anything that is not a CitadelError
is a 500 `internal_error` whose details stay in the server log.
"""

from __future__ import annotations


class CitadelError(Exception):
    """Base error: `code` is stable and machine-readable, the message is for people. A plain
    CitadelError is the caller's problem (400) unless a family below says otherwise."""

    code = "citadel_error"
    http_status = 400

    def __init__(self, message: str, *, code: str | None = None, retry_after_s: float | None = None):
        super().__init__(message)
        if code:
            self.code = code
        self.retry_after_s = retry_after_s

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.code


# ---------------------------------------------------------------------- the families, by HTTP status
class InvalidRequest(CitadelError):
    """A well-formed request whose content is refused (a bad field, an unsupported file type)."""

    code = "invalid_request"
    http_status = 422


class Unauthenticated(CitadelError):
    """The caller or its user context could not be verified."""

    code = "unauthenticated"
    http_status = 401


class Forbidden(CitadelError):
    """Verified, but not allowed to do this."""

    code = "forbidden"
    http_status = 403


class NotFound(CitadelError):
    """Absent, or outside the caller's scope (the two look the same, so ids cannot be probed)."""

    code = "not_found"
    http_status = 404


class Conflict(CitadelError):
    """The request collides with the state it would change (an idempotency key, a concurrent publish)."""

    code = "conflict"
    http_status = 409


class PayloadTooLarge(CitadelError):
    code = "payload_too_large"
    http_status = 413


class BudgetExhausted(CitadelError):
    """A tenant's or user's budget refuses the request; `retry_after_s` says when it refills."""

    code = "budget_exhausted"
    http_status = 429


class Unavailable(CitadelError):
    """A dependency cannot serve now; the request may be retried. The message names the dependency,
    never its address or its own error text (those go to the server log)."""

    code = "unavailable"
    http_status = 503


class DeadlineExceeded(CitadelError):
    """The request's deadline passed before the work finished."""

    code = "deadline_exceeded"
    http_status = 504


class InternalError(CitadelError):
    code = "internal_error"
    http_status = 500


# ---------------------------------------------------------------------- named errors
class ParseError(CitadelError):
    """A document could not be parsed into located sections (goes to the dead-letter table)."""

    code = "parse_error"


class InputRejected(CitadelError):
    """Input refused before parsing (too large, empty, unknown type)."""

    code = "input_rejected"


class PermissionDenied(Forbidden):
    code = "permission_denied"


class VerificationFailed(InternalError):
    """A built segment failed its pre-publish checks; nothing is published."""

    code = "verification_failed"


class InvalidTenant(CitadelError):
    """A tenant id that is not a plain, lower-case ASCII name (citadel.types.validate_tenant_id).

    Tenant ids name directories (`partitions/<tenant>/`), so one is checked before any path is formed."""

    code = "invalid_tenant"


class EmbeddingModelMismatch(Unavailable):
    """A segment's vectors come from another embedding model (or dimension) than the query's: their
    similarities mean nothing, so the segment is not searched until it is re-embedded."""

    code = "embedding_model_mismatch"


class ReembedRequired(Conflict):
    """A publish would put rows embedded by the published model beside rows of the configured one;
    the tenant must be re-embedded first (`citadel reembed`, or any in-process ingest does it)."""

    code = "reembed_required"


class CatalogUnavailable(Unavailable):
    """The catalog (the permission source) cannot be read or written. Every backend raises this for
    its own database errors, so callers fail closed without knowing which database it is."""

    code = "permissions_unavailable"


class PermissionsUnavailable(Unavailable):
    """The live permission check could not run (its store failed or its breaker is open): fail closed."""

    code = "permissions_unavailable"
