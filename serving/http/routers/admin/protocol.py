"""The admin family's request and response bodies."""

from __future__ import annotations

import base64
import binascii
from typing import Any, Literal, Optional

from pydantic import BaseModel, Field, model_validator

from citadel.errors import CitadelError, InvalidRequest
from citadel.ingest.sources import TrustedFields
from citadel.types import Governance
from serving.http.protocol import NAME_PATTERN, RequestBody, ResponseBody

# The largest row id a path may name (a catalog row id is a 64-bit integer; larger is a 422, not a 500).
MAX_ROW_ID = 2**63 - 1


# ---------------------------------------------------------------------- documents and jobs
class UploadRequest(RequestBody):
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
    # Governance (citadel.types.Governance): the catalog's, set here or by the ACL file, never by the content.
    policy_id: Optional[str] = Field(None, pattern=NAME_PATTERN, description="The policy this document is "
                                     "(GET /v1/policies/{id} resolves it to its current approved revision).")
    policy_revision: Optional[str] = Field(None, pattern=NAME_PATTERN, description="The policy's revision.")
    sensitivity: Optional[str] = Field(None, pattern=NAME_PATTERN, description="One of governance.sensitivities.")
    retention_class: Optional[str] = Field(None, pattern=NAME_PATTERN, description="One of "
                                           "governance.retention_classes: past its days the document is withdrawn.")

    @model_validator(mode="after")
    def _one_content(self) -> "UploadRequest":
        if (self.text is None) == (self.content_base64 is None):
            raise ValueError("give exactly one of `text` or `content_base64`")
        self.trusted_fields()  # a real calendar date, printable names: refused here with a 422
        return self

    def trusted_fields(self) -> TrustedFields:
        try:
            return TrustedFields(owner=self.owner or "", status=self.status, effective_date=self.effective_date,
                                 supersedes=self.supersedes, governance=Governance(
                                     self.policy_id, self.policy_revision, self.sensitivity, self.retention_class))
        except CitadelError as error:
            raise ValueError(str(error)) from None

    def content(self) -> bytes:
        if self.text is not None:
            return self.text.encode("utf-8")
        try:
            return base64.b64decode(self.content_base64 or "", validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest("content_base64 is not valid base64") from None


class AclRequest(RequestBody):
    groups: list[str] = Field(..., description="Groups that may read the document from now on.")


class JobStarted(ResponseBody):
    job_id: str = Field(..., description="Poll /v1/admin/jobs/{job_id}.")
    status: str = Field(..., description="queued: stored, waiting for a job runner.")
    version: Optional[int] = Field(None, description="The document version the job will publish (unless the "
                                                     "content is already published: then it ends `unchanged`).")


class JobProgress(BaseModel):
    stage: str = Field(..., description="claimed | parse | embed | build | documents | publish | done.")
    attempt: Optional[int] = Field(None, description="Which run of the job this is (a takeover or retry adds one).")
    documents_done: int = 0
    documents_total: int = 0
    chunks_done: int = Field(0, description="Chunks embedded so far.")
    chunks_total: int = 0
    engine: Optional[str] = Field(None, description="local (the runner's process) or ray (Ray Data).")
    error: Optional[str] = Field(None, description="Why the last attempt failed, when it is to be retried.")


class Job(ResponseBody):
    job_id: str
    tenant_id: str
    kind: str
    status: str = Field(..., description="queued | running | succeeded | partial | failed.")
    created_at: float
    finished_at: Optional[float]
    report: Optional[dict[str, Any]] = Field(..., description="The job's report once it finished.")
    document_id: Optional[str] = Field(None, description="An upload's document.")
    version: Optional[int] = Field(None, description="The version an upload's job reserved.")
    attempts: Optional[int] = Field(None, description="Runs of an upload's job so far (each takeover or retry is one).")
    lease_expires_at: Optional[float] = Field(
        None, description="While a job runner holds the job: when its lease runs out unless renewed (epoch s).")
    progress: Optional[JobProgress] = Field(None, description="An upload's job: how far its latest run got.")


class DeletedCopies(BaseModel):
    raw_files: int
    answers: int


class Withdrawn(ResponseBody):
    tenant_id: str
    document_id: str
    status: str
    deleted: DeletedCopies


class AclSet(ResponseBody):
    tenant_id: str
    document_id: str
    groups: list[str]
    acl_version: int


# ---------------------------------------------------------------------- kept prompts
class KeptPromptBody(ResponseBody):
    request_id: str
    tenant_id: str
    user_id: str
    ts: float
    kid: str = Field(..., description="The key the prompt was kept under.")
    prompt: Any = Field(..., description="The chat messages the generator was sent (a list of {role, content}).")
    reply: str


# ---------------------------------------------------------------------- the pause switch
class PauseRequest(RequestBody):
    tenant_id: Optional[str] = Field(None, description="The tenant to pause it for; null: everywhere "
                                     "(platform admins only).")


class Pause(BaseModel):
    target: str
    tenant_id: Optional[str]
    paused_at: float


class ToolPauses(ResponseBody):
    targets: list[str] = Field(..., description="What may be paused: `model` and the registry's tools.")
    pauses: list[Pause] = Field(..., description="The pauses in force that this admin may see.")


class PauseState(ResponseBody):
    target: str
    tenant_id: Optional[str]
    paused: bool


# ---------------------------------------------------------------------- candidate test items
class CandidateLabel(RequestBody):
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


class Candidate(ResponseBody):
    id: int
    tenant_id: str
    source: str = Field(..., description="answer_feedback or tool:<name>.")
    origin: str = Field(..., description="What it came from (an answer or an approval); queued once per origin.")
    status: str = Field(..., description="pending | promoted | dismissed.")
    item: dict[str, Any]
    label: Optional[dict[str, Any]] = Field(..., description="The owner's label, once promoted.")
    created_at: float
    decided_at: Optional[float]
    decided_by: Optional[str]


class CandidatePage(ResponseBody):
    tenant_id: str
    candidates: list[Candidate] = Field(..., description="Oldest first; the next page starts after the last id.")
