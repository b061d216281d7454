"""One JSON error shape for every failure the API returns (DESIGN.md §9).

    {"error": {"code": "<machine-readable>", "message": "<for people>", "request_id": "<id>"}}

`code` is stable; clients branch on it. The HTTP status follows from the code, so a new error type
only needs a row here. Unknown failures are 500 `internal_error` and never leak a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

# code → HTTP status. Anything not listed is a client error (400) when it is a CitadelError.
STATUS_BY_CODE: dict[str, int] = {
    "unauthenticated": 401,
    "missing_credential": 401,
    "invalid_credential": 401,
    "missing_user_context": 401,
    "malformed_user_context": 401,
    "invalid_signature": 401,
    "expired_user_context": 401,
    "invalid_user_context": 401,
    "wrong_audience": 401,
    "user_context_not_bound_to_caller": 401,
    "unknown_key": 401,
    "algorithm_not_allowed": 401,
    "wrong_issuer": 401,
    "credential_revoked": 401,
    "credential_expired": 401,
    "admin_required": 403,
    "tenant_not_allowed": 403,
    "platform_admin_required": 403,
    "forbidden": 403,
    "permission_denied": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "invalid_tenant": 400,
    "idempotency_conflict": 409,
    "reembed_required": 409,
    "idempotency_in_progress": 409,
    "payload_too_large": 413,
    "invalid_request": 422,
    "budget_exhausted": 429,
    "permissions_unavailable": 503,
    "identity_unavailable": 503,
    "embedding_model_mismatch": 503,  # the tenant's segment awaits re-embedding with the query's model
    "state_unavailable": 503,
    "overloaded": 503,
    "deadline_exceeded": 504,
    "fault_injection_disabled": 403,
    "internal_error": 500,
}
CLIENT_ERROR = 400


@dataclass
class ApiError(Exception):
    """An error the API reports as-is: a code from STATUS_BY_CODE and a message for people."""

    code: str
    message: str
    retry_after_s: float | None = None

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    @property
    def status(self) -> int:
        return status_for(self.code)


def status_for(code: str) -> int:
    return STATUS_BY_CODE.get(code, CLIENT_ERROR)


def error_body(code: str, message: str, request_id: str) -> dict:
    return {"error": {"code": code, "message": message, "request_id": request_id}}
