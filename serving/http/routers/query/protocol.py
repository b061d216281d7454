"""The query family's request and response bodies."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, Field

from serving.http.protocol import RequestBody, ResponseBody

MAX_QUESTION_CHARS = 2_000
MAX_TOP_K = 50


class RetrieveRequest(RequestBody):
    query: str = Field(..., min_length=1, max_length=MAX_QUESTION_CHARS, description="What to search for.")
    top_k: int = Field(8, ge=1, le=MAX_TOP_K, description="Passages to return.")


class AnswerRequest(RequestBody):
    # An empty question is answered with a clarifying question, not a validation error.
    question: str = Field(..., max_length=MAX_QUESTION_CHARS, description="The question.")


class Citation(BaseModel):
    chunk_id: str
    document_id: str
    title: str
    version: int
    heading: str
    page: Optional[int]
    source: str
    # The catalog's governance of the cited version (the ACL file or the admin API set it, never the
    # document's content): serving/http/routers/documents/protocol.py `Governance`.
    policy_id: Optional[str] = None
    policy_revision: Optional[str] = None
    sensitivity: Optional[str] = None
    retention_class: Optional[str] = None
    url: Optional[str] = Field(None, description="Where this deployment opens the cited section (relative to its base "
                                                 "URL; the quoted sentence marked): GET /v1/documents/{document}/"
                                                 "versions/{version}/sections/{chunk_id}, the same live permission "
                                                 "check as retrieval, 404 once the caller may not read it.")


class Passage(Citation):
    """A retrieved passage: where it is from (as a citation), its text and its fused score."""

    text: str
    score: float


class RetrieveResponse(ResponseBody):
    request_id: str
    plan: str
    degraded: list[str]
    passages: list[Passage]


class AnswerResponse(ResponseBody):
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


class ReviewPendingBody(ResponseBody):
    """202: a failed check holds the answer for a person (citadel/reviews/tasks.py). Nothing of the
    held answer is shown; ask again once it is reviewed (every check runs again)."""

    status: Literal["review_pending"] = "review_pending"
    request_id: str
    review_id: str
    reason: Optional[str] = Field(None, description="conflict_undated | missing_reference | invalid_tool_response "
                                                   "| action_out_of_scope")
    message: str
    reviewers: str = Field(..., description="The group (or document owner) the review task went to.")
    expire_at: Optional[float] = None
