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
