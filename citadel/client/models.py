"""What the API returns, as frozen dataclasses (serving/http/routers/*/protocol.py describe the same
bodies on the server). Each is built from the JSON body by `parse`, which ignores keys a newer server
adds and fills a key an older one lacks with the field's default; `raw` keeps the body as it came,
for what a model does not name (a run's final event, say)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, TypeVar, Union

T = TypeVar("T", bound="Model")


@dataclass(frozen=True, kw_only=True)
class Model:
    # field name -> the model of its value (a list of them when the JSON holds a list)
    NESTED: ClassVar[dict[str, type["Model"]]] = {}
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def parse(cls: type[T], body: dict[str, Any]) -> T:
        values: dict[str, Any] = {}
        for spec in dataclasses.fields(cls):
            if spec.name == "raw" or spec.name not in body:
                continue
            value, nested = body[spec.name], cls.NESTED.get(spec.name)
            if nested is not None and value is not None:
                value = [nested.parse(v) for v in value] if isinstance(value, list) else nested.parse(value)
            values[spec.name] = value
        return cls(raw=body, **values)


# ---------------------------------------------------------------------- query
@dataclass(frozen=True, kw_only=True)
class Citation(Model):
    """Where a passage or an answer's claim is from; `url` opens the section (`Citadel.open_citation`)."""

    chunk_id: str = ""
    document_id: str = ""
    title: str = ""
    version: int = 0
    heading: str = ""
    page: Optional[int] = None
    source: str = ""
    policy_id: Optional[str] = None
    policy_revision: Optional[str] = None
    sensitivity: Optional[str] = None
    retention_class: Optional[str] = None
    url: Optional[str] = None


@dataclass(frozen=True, kw_only=True)
class Passage(Citation):
    text: str = ""
    score: float = 0.0


@dataclass(frozen=True, kw_only=True)
class RetrieveResult(Model):
    NESTED: ClassVar[dict[str, type[Model]]] = {"passages": Passage}
    request_id: str = ""
    plan: str = ""
    degraded: list[str] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Answer(Model):
    """outcome: answered | not_confirmed | refused (the last two with `refused` true)."""

    NESTED: ClassVar[dict[str, type[Model]]] = {"citations": Citation}
    request_id: str = ""
    answer: str = ""
    outcome: str = ""
    refused: bool = False
    reason: Optional[str] = None
    degraded: list[str] = field(default_factory=list)
    citations: list[Citation] = field(default_factory=list)
    cached: bool = False
    bundle_id: Optional[str] = None


@dataclass(frozen=True, kw_only=True)
class ReviewPending(Model):
    """202 from /v1/answer: a failed check holds the answer for a person; ask again once reviewed."""

    status: str = "review_pending"
    request_id: str = ""
    review_id: str = ""
    reason: Optional[str] = None
    message: str = ""
    reviewers: str = ""
    expire_at: Optional[float] = None


# ---------------------------------------------------------------------- conversations and runs
@dataclass(frozen=True, kw_only=True)
class Conversation(Model):
    conversation_id: str = ""


@dataclass(frozen=True, kw_only=True)
class ConversationDeleted(Model):
    conversation_id: str = ""
    deleted: bool = False


@dataclass(frozen=True, kw_only=True)
class UserDataDeleted(Model):
    tenant_id: str = ""
    user_id: str = ""
    deleted: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RunStarted(Model):
    run_id: str = ""


@dataclass(frozen=True, kw_only=True)
class RunStep(Model):
    id: str = ""
    status: str = ""


@dataclass(frozen=True, kw_only=True)
class RunState(Model):
    NESTED: ClassVar[dict[str, type[Model]]] = {"steps": RunStep}
    run_id: str = ""
    conversation_id: str = ""
    status: str = ""
    path: Optional[str] = None
    stop_reason: Optional[str] = None
    created_at: float = 0.0
    updated_at: float = 0.0
    outcome: Optional[str] = None
    steps: list[RunStep] = field(default_factory=list)


TERMINAL_EVENTS = ("final", "error")


@dataclass(frozen=True, kw_only=True)
class RunEvent(Model):
    """One event of a run's log: `seq` is its place (the stream's `id:`), `final` is authoritative."""

    seq: int = 0
    type: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_EVENTS


@dataclass(frozen=True, kw_only=True)
class CancelRequested(Model):
    run_id: str = ""
    status: str = ""
    cancel_requested: bool = False


@dataclass(frozen=True, kw_only=True)
class FeedbackRecorded(Model):
    feedback_id: int = 0
    answer_id: str = ""
    sources: list[dict[str, Any]] = field(default_factory=list)


# ---------------------------------------------------------------------- approvals
@dataclass(frozen=True, kw_only=True)
class Approval(Model):
    """An approval (of a tool call) or a review task (a failed check), as its reviewers see it."""

    approval_id: str = ""
    run_id: str = ""
    step_id: str = ""
    tool: str = ""
    requester: str = ""
    proposed_args: dict[str, Any] = field(default_factory=dict)
    final_args: Optional[dict[str, Any]] = None
    status: str = ""
    approver_group: str = ""
    deciders: list[str] = field(default_factory=list)
    escalated: bool = False
    expire_at: Optional[float] = None
    decided_by: Optional[str] = None
    decided_at: Optional[float] = None
    comment: str = ""
    created_at: float = 0.0
    kind: str = ""
    reason: Optional[str] = None
    decisions: list[str] = field(default_factory=list)
    honeypot: Optional[bool] = None
    caught: Optional[bool] = None
    message: Optional[str] = None


# ---------------------------------------------------------------------- documents
@dataclass(frozen=True, kw_only=True)
class QuotedSentence(Model):
    text: str = ""
    start: int = 0
    end: int = 0


@dataclass(frozen=True, kw_only=True)
class Section(Model):
    """What a citation's URL opens: the whole section, the quoted sentence marked (<< >>)."""

    NESTED: ClassVar[dict[str, type[Model]]] = {"quote": QuotedSentence}
    document_id: str = ""
    version: int = 0
    chunk_id: str = ""
    title: str = ""
    heading: str = ""
    heading_path: list[str] = field(default_factory=list)
    page: Optional[int] = None
    source: str = ""
    text: str = ""
    marked_text: str = ""
    truncated: bool = False
    quote: Optional[QuotedSentence] = None
    url: str = ""
    policy_id: Optional[str] = None
    policy_revision: Optional[str] = None
    sensitivity: Optional[str] = None
    retention_class: Optional[str] = None


@dataclass(frozen=True, kw_only=True)
class Policy(Model):
    document_id: str = ""
    version: int = 0
    title: str = ""
    owner: str = ""
    effective_date: Optional[str] = None
    policy_id: Optional[str] = None
    policy_revision: Optional[str] = None
    sensitivity: Optional[str] = None
    retention_class: Optional[str] = None


# ---------------------------------------------------------------------- admin
@dataclass(frozen=True, kw_only=True)
class JobStarted(Model):
    job_id: str = ""
    status: str = ""
    version: Optional[int] = None


@dataclass(frozen=True, kw_only=True)
class Job(Model):
    """An ingestion job: status queued | running | succeeded | partial | failed."""

    job_id: str = ""
    tenant_id: str = ""
    kind: str = ""
    status: str = ""
    created_at: float = 0.0
    finished_at: Optional[float] = None
    report: Optional[dict[str, Any]] = None
    document_id: Optional[str] = None
    version: Optional[int] = None
    attempts: Optional[int] = None
    lease_expires_at: Optional[float] = None
    progress: Optional[dict[str, Any]] = None

    @property
    def done(self) -> bool:
        return self.status not in ("queued", "running")


@dataclass(frozen=True, kw_only=True)
class Withdrawn(Model):
    tenant_id: str = ""
    document_id: str = ""
    status: str = ""
    deleted: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class AclSet(Model):
    tenant_id: str = ""
    document_id: str = ""
    groups: list[str] = field(default_factory=list)
    acl_version: int = 0


@dataclass(frozen=True, kw_only=True)
class KeptPrompt(Model):
    request_id: str = ""
    tenant_id: str = ""
    user_id: str = ""
    ts: float = 0.0
    kid: str = ""
    prompt: Any = None
    reply: str = ""


@dataclass(frozen=True, kw_only=True)
class ToolPauses(Model):
    targets: list[str] = field(default_factory=list)
    pauses: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class PauseState(Model):
    target: str = ""
    tenant_id: Optional[str] = None
    paused: bool = False


@dataclass(frozen=True, kw_only=True)
class Candidate(Model):
    id: int = 0
    tenant_id: str = ""
    source: str = ""
    origin: str = ""
    status: str = ""
    item: dict[str, Any] = field(default_factory=dict)
    label: Optional[dict[str, Any]] = None
    created_at: float = 0.0
    decided_at: Optional[float] = None
    decided_by: Optional[str] = None


@dataclass(frozen=True, kw_only=True)
class CandidatePage(Model):
    NESTED: ClassVar[dict[str, type[Model]]] = {"candidates": Candidate}
    tenant_id: str = ""
    candidates: list[Candidate] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Health(Model):
    status: str = ""
    topology: str = ""


AnswerOrReview = Union[Answer, ReviewPending]
