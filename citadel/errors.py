"""Errors with a machine-readable code, so callers (CLI, HTTP, job reports) can show a reason."""

from __future__ import annotations


class CitadelError(Exception):
    """Base error: `code` is stable and machine-readable, the message is for people."""

    code = "citadel_error"

    def __init__(self, message: str, *, code: str | None = None):
        super().__init__(message)
        if code:
            self.code = code


class ParseError(CitadelError):
    """A document could not be parsed into located sections (goes to the dead-letter table)."""

    code = "parse_error"


class InputRejected(CitadelError):
    """Input refused before parsing (too large, empty, unknown type)."""

    code = "input_rejected"


class NotFound(CitadelError):
    code = "not_found"


class PermissionDenied(CitadelError):
    code = "permission_denied"


class VerificationFailed(CitadelError):
    """A built segment failed its pre-publish checks; nothing is published."""

    code = "verification_failed"


class InvalidTenant(CitadelError):
    """A tenant id that is not a plain, lower-case ASCII name (citadel.types.validate_tenant_id).

    Tenant ids name directories (`partitions/<tenant>/`), so one is checked before any path is formed."""

    code = "invalid_tenant"


class EmbeddingModelMismatch(CitadelError):
    """A segment's vectors come from another embedding model (or dimension) than the query's: their
    similarities mean nothing, so the segment is not searched until it is re-embedded."""

    code = "embedding_model_mismatch"


class ReembedRequired(CitadelError):
    """A publish would put rows embedded by the published model beside rows of the configured one;
    the tenant must be re-embedded first (`citadel reembed`, or any in-process ingest does it)."""

    code = "reembed_required"
