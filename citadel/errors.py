"""The error tree (DESIGN.md §2): every error carries a machine-readable `code` and the HTTP status
an API reports it with, so the CLI, the HTTP layer and job reports show a reason without a table of
codes beside the classes.

A family class fixes the status (Unauthenticated is always 401); an instance may name a finer code
within it (`Unauthenticated(..., code="expired_user_context")`). Anything that is not a CitadelError
is a 500 `internal_error` whose details stay in the server log.

Every class that carries a code of its own is defined here, once, and each such code belongs to one
class (tests/unit/test_error_codes.py): the rooms that raise them import them from here (and keep
re-exporting them under their old names). This module imports nothing of the project's, so any
room may import it.
"""

from __future__ import annotations

from enum import Enum


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


class Overloaded(Unavailable):
    """The gateway is starting, or has more requests than it serves well: retry after `retry_after_s`."""

    code = "overloaded"


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


class PermissionsUnavailable(Unavailable):
    """The live permission check could not run (its store failed or its breaker is open): fail closed."""

    code = "permissions_unavailable"


class CatalogUnavailable(PermissionsUnavailable):
    """The catalog (the permission source) cannot be read or written. Every backend raises this for
    its own database errors, so callers fail closed without knowing which database it is; to a
    client it is the permission store being unavailable (its code)."""



# ---------------------------------------------------------------------- ingestion
class BadManifest(CitadelError):
    code = "bad_manifest"


class BadMetadata(CitadelError):
    """A trusted document field that is malformed (a date that is not YYYY-MM-DD, say)."""

    code = "bad_metadata"


class DuplicateDocuments(CitadelError):
    """Two sources of one job would publish the same (tenant, document id): the same version twice."""

    code = "duplicate_document"


class PublishConflict(CitadelError):
    """Another job published this tenant after our build started; publishing would lose its work."""

    code = "publish_conflict"


# ---------------------------------------------------------------------- models and their servers
class GeneratorError(CitadelError):
    """A backend could not produce text (unreachable server, bad response, missing model)."""

    code = "generator_failed"


class RerankError(CitadelError):
    """The reranker could not score (missing model directory, failed forward pass)."""

    code = "rerank_failed"


class ReaderError(CitadelError):
    """The reader cannot score: its artefact is missing, corrupt or made for other base weights, or
    its model server failed."""

    code = "reader_failed"


class PromptTooLarge(PayloadTooLarge):
    """The parts that are never cut (the system text, the task) do not fit their allowance or the cap."""

    code = "prompt_too_large"


class PromptKeysUnavailable(Unavailable):
    """The prompt keys are missing or malformed (the message names a kid at most, never a path)."""

    code = "prompt_keys_unavailable"


class PromptUnreadable(Unavailable):
    """A kept record that does not decrypt (a key gone, a row tampered with)."""

    code = "prompt_unreadable"


# ---------------------------------------------------------------------- state and resilience
class StateUnavailable(Unavailable):
    """The state backend cannot be reached: callers fail open (cache) or closed (budgets, idempotency)."""

    code = "state_unavailable"


class BreakerOpen(Unavailable):
    """The breaker did not admit the call; the caller should fall back or fail fast."""

    code = "breaker_open"

    def __init__(self, breaker: str, state: Enum):
        super().__init__(f"{breaker}: circuit breaker {state.value}, call not admitted")
        self.breaker = breaker
        self.state = state  # a citadel.resilience.breaker.BreakerState


class InvalidDeadline(CitadelError):
    """A deadline header that is not a finite number of epoch seconds."""

    code = "invalid_deadline"


class InjectedFault(Unavailable):
    """The error a drill injects; its own code so dashboards can tell it from a real failure."""

    code = "injected_fault"


class NoReplica(Unavailable):
    code = "no_replica"


# ---------------------------------------------------------------------- runs and tools
class PlanInvalid(InvalidRequest):
    """A plan or reflection that breaks the schema. A model backend asks once more, then raises
    this; the orchestrator then falls back (the single-shot path, or the rules' reflection)."""

    code = "plan_invalid"


class PlannerUnavailable(Unavailable):
    """The planner's server could not be reached or answered with an error."""

    code = "planner_unavailable"


class ToolNotAllowed(Forbidden):
    """A step called a tool it does not name."""

    code = "tool_not_allowed"


class InvalidToolArguments(InvalidRequest):
    """Arguments a tool does not accept (the agent's own tools and the registry's HTTP tools alike)."""

    code = "invalid_tool_args"


class InvalidToolSpec(CitadelError):
    """The tool registry (or one tool in it) is refused; `tool` and `field` say where, when known."""

    code = "invalid_tool_spec"
    http_status = 422

    def __init__(self, problem: str, *, tool: str | None = None, field: str | None = None, source: str = ""):
        where = " ".join(part for part in (source and f"{source}:", tool and f"tool {tool!r}:",
                                           field and f"{field}:") if part)
        super().__init__(f"{where} {problem}" if where else problem)
        self.tool, self.field, self.problem = tool, field, problem


class ToolCallFailed(Unavailable):
    """The tool's system could not be reached or failed (5xx)."""

    code = "tool_call_failed"


class ToolCallRefused(CitadelError):
    """The tool's system refused the call (4xx): for this user, these arguments, or this record."""

    code = "tool_call_refused"
    http_status = 403


class DelegationRefused(CitadelError):
    """The token service would not issue a token for this user (lost access, expired or foreign grant),
    or the run holds no delegation: the tool call is not made."""

    code = "delegation_refused"
    http_status = 403


class TokenServiceUnavailable(Unavailable):
    code = "token_service_unavailable"
