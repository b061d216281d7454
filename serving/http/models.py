"""The API's protocol models (DESIGN.md §9): request bodies with their bounds, response bodies and
the one error shape. Unknown request fields are ignored, never trusted."""

from __future__ import annotations

import base64
import binascii
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from citadel.errors import CitadelError, InvalidRequest
from citadel.ingest.sources import TrustedFields

MAX_QUESTION_CHARS = 2_000
MAX_TOP_K = 50
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"


class _Body(BaseModel):
    # Unknown fields are ignored, never trusted: a `tenant_id` or `groups` in a body changes nothing.
    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="after")
    def _utf8_only(self) -> "_Body":
        # JSON may spell a lone surrogate ("\ud800"); such a string cannot be stored or hashed as
        # UTF-8, so it is refused here with a 422 instead of failing deep inside a stage.
        for name, value in self:
            for text in value if isinstance(value, list) else [value]:
                if isinstance(text, str) and not _utf8(text):
                    raise ValueError(f"{name} is not valid Unicode text (a lone surrogate)")
        return self


class RetrieveRequest(_Body):
    query: str = Field(..., min_length=1, max_length=MAX_QUESTION_CHARS, description="What to search for.")
    top_k: int = Field(8, ge=1, le=MAX_TOP_K, description="Passages to return.")


class AnswerRequest(_Body):
    # An empty question is answered with a clarifying question (issue 13), not a validation error.
    question: str = Field(..., max_length=MAX_QUESTION_CHARS, description="The question.")


class UploadRequest(_Body):
    document_id: str = Field(..., pattern=NAME_PATTERN, description="Stable id of the document in its tenant.")
    filename: str = Field(..., min_length=1, max_length=255, description="Name with its type: .md, .txt or .pdf.")
    text: Optional[str] = Field(None, description="The document as text (Markdown or plain).")
    content_base64: Optional[str] = Field(None, description="The document's bytes, base64 (e.g. a PDF).")
    groups: list[str] = Field(default_factory=list, description="Groups that may read it (empty: nobody).")
    # Trusted fields: only the request sets them; the document's own front matter never does.
    owner: Optional[str] = Field(None, max_length=256, description="Who owns the document.")
    status: Optional[Literal["draft", "published", "archived", "withdrawn"]] = Field(
        None, description="Only a published status (ingest.published_statuses) is served; others are skipped.")
    effective_date: Optional[str] = Field(None, pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
                                          description="ISO date (YYYY-MM-DD) the document takes effect.")
    supersedes: Optional[str] = Field(None, pattern=NAME_PATTERN,
                                      description="Id of a document of the same tenant this one replaces.")

    @model_validator(mode="after")
    def _one_content(self) -> "UploadRequest":
        if (self.text is None) == (self.content_base64 is None):
            raise ValueError("give exactly one of `text` or `content_base64`")
        self.trusted_fields()  # a real calendar date, printable names: refused here with a 422
        return self

    def trusted_fields(self) -> TrustedFields:
        try:
            return TrustedFields(owner=self.owner or "", status=self.status, effective_date=self.effective_date,
                                 supersedes=self.supersedes)
        except CitadelError as error:
            raise ValueError(str(error)) from None

    def content(self) -> bytes:
        if self.text is not None:
            return self.text.encode("utf-8")
        try:
            return base64.b64decode(self.content_base64 or "", validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest("content_base64 is not valid base64") from None


class AclRequest(_Body):
    groups: list[str] = Field(..., description="Groups that may read the document from now on.")


class FaultRequest(_Body):
    """A drill's fault on one stage (see citadel/resilience/faults.py FaultSpec for the semantics)."""

    latency_ms: float = Field(0.0, ge=0, description="Added latency (the mean or median for distributions).")
    latency_dist: Literal["fixed", "uniform", "exponential", "lognormal"] = "fixed"
    latency_jitter_ms: float = Field(0.0, ge=0)
    error_rate: float = Field(0.0, ge=0, le=1, description="Share of calls that fail.")
    hang: bool = Field(False, description="Calls wait until the fault is cleared (or max_hang_s).")
    max_hang_s: Optional[float] = Field(None, gt=0)
    replicas: Union[Literal["all"], list[int]] = Field("all", description="Replica ranks affected.")
    kill: bool = Field(False, description="Kill one affected replica (Serve restarts it).")
    kill_nonce: Optional[str] = None


class MessageRequest(_Body):
    # Its length is checked by the runs service against `agent.max_message_chars` (413, not 422).
    content: str = Field(..., description="The user's message; it starts a run.")


class PauseRequest(_Body):
    tenant_id: Optional[str] = Field(None, description="The tenant to pause it for; null: everywhere "
                                     "(platform admins only).")


class DecisionRequest(_Body):
    decision: Literal["approve", "edit_and_approve", "reject", "correct", "request_info"] = Field(
        description="An approval: approve | edit_and_approve | reject. A review task for a failed check: "
                    "correct (the source was fixed, or the action's arguments are edited; every check runs "
                    "again) | request_info | reject.")
    edits: Optional[dict[str, Any]] = Field(None, description="edit_and_approve, or correct on an action out of "
                                            "scope: the arguments changed (checked again by the policy engine: "
                                            "schema and the approver's limit).")
    comment: str = Field("", description="Why (at most 2,000 characters); kept with the decision.")


class FeedbackRequest(_Body):
    vote: Literal["up", "down"]
    reason: Optional[Literal["wrong_source", "incomplete", "outdated", "other"]] = None
    comment: str = Field("", description="Free text (at most 2,000 characters).")


class CandidateLabel(_Body):
    """An owner's label for a candidate test item (citadel/quality/candidates.py): for an answer item,
    `expect` answer | refuse with its documents; for a tool item, approve with `final_args`, or reject."""

    expect: Literal["answer", "refuse", "approve", "reject"]
    expected_documents: Optional[list[str]] = Field(None, max_length=50, description="Answer items: the "
                                                    "documents an answer must cite (at least one for `answer`).")
    expected_answer: Optional[list[str]] = Field(None, max_length=50, description="Answer items: facts the answer "
                                                 "must hold (\"a|b\": either).")
    expected_heading: Optional[str] = Field(None, max_length=256)
    expected_reason: Optional[str] = Field(None, max_length=256)
    must_not_cite_documents: Optional[list[str]] = Field(None, max_length=50)
    groups: Optional[list[str]] = Field(None, max_length=50, description="Answer items: the groups the set's user "
                                        "asks with (default: those the expected documents are shared with).")
    category: Optional[str] = Field(None, max_length=256)
    split: Optional[Literal["", "dev", "test"]] = None
    final_args: Optional[dict[str, Any]] = Field(None, description="Tool items, `approve`: the right arguments.")


class Citation(BaseModel):
    chunk_id: str
    document_id: str
    title: str
    version: int
    heading: str
    page: Optional[int]
    source: str


class Passage(Citation):
    """A retrieved passage: where it is from (as a citation), its text and its fused score."""

    text: str
    score: float


class RetrieveResponse(BaseModel):
    request_id: str
    plan: str
    degraded: list[str]
    passages: list[Passage]


class AnswerResponse(BaseModel):
    request_id: str
    answer: str
    outcome: Literal["answered", "not_confirmed", "refused"] = Field(
        ..., description="answered: an asserted, cited answer | not_confirmed: the topic was found but not the "
                         "asked fact; nothing is asserted and `citations` holds the closest sections | refused: "
                         "nothing on topic (`reason` says why). Both of the last two have `refused: true`.")
    refused: bool
    reason: Optional[str]
    degraded: list[str]
    citations: list[Citation]
    cached: bool = False
    bundle_id: Optional[str] = Field(None, description="The config bundle that shaped the answer (prompts, models "
                                     "by checksum, retrieval and gate settings, tool registry): `citadel bundle "
                                     "show ID`.")


class ReviewPendingBody(BaseModel):
    """202: a failed check holds the answer for a person (citadel/tools/reviews.py). Nothing of the
    held answer is shown; ask again once it is reviewed (every check runs again)."""

    status: Literal["review_pending"] = "review_pending"
    request_id: str
    review_id: str
    reason: Optional[str] = Field(None, description="conflict_undated | missing_reference | invalid_tool_response "
                                                   "| action_out_of_scope")
    message: str
    reviewers: str = Field(..., description="The group (or document owner) the review task went to.")
    expire_at: Optional[float] = None


class ErrorDetail(BaseModel):
    code: str = Field(..., description="Machine-readable; each error class of citadel/errors.py names its code and status.")
    message: str
    request_id: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


ERRORS = {status: {"model": ErrorResponse} for status in (400, 401, 403, 404, 409, 413, 422, 429, 503, 504)}
