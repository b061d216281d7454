"""Every public route of the API as a `Call` (what to send, how to read the reply, whether it may be
sent again): written once here, sent by the sync client and the async one alike. The routes
themselves are documented in docs/http-api.md."""

from __future__ import annotations

import base64
import urllib.parse
import uuid
from typing import Any, Callable, Iterable, Optional, Union

import httpx

from citadel.client import models as m
from citadel.client.transport import Call

DOCUMENTS_PREFIX = "/v1/documents/"


def model(cls: type[m.Model]) -> Callable[[httpx.Response], Any]:
    return lambda response: cls.parse(response.json())


def _answer_or_review(response: httpx.Response) -> m.AnswerOrReview:
    body = response.json()
    return m.ReviewPending.parse(body) if response.status_code == 202 else m.Answer.parse(body)


def _events(response: httpx.Response) -> list[m.RunEvent]:
    return [m.RunEvent.parse(event) for event in response.json()]


def _approvals(response: httpx.Response) -> list[m.Approval]:
    return [m.Approval.parse(item) for item in response.json()["approvals"]]


def _segment(value: Union[str, int]) -> str:
    return urllib.parse.quote(str(value), safe="")


def _keyed(key: Optional[str]) -> dict[str, str]:
    """An admin write's idempotency key: the caller's, or a fresh one kept across this call's retries."""
    return {"idempotency-key": key or uuid.uuid4().hex}


# ---------------------------------------------------------------------- health and query
def health() -> Call:
    return Call("GET", "/healthz", model(m.Health), idempotent=True, as_user=False)


def retrieve(query: str, top_k: int) -> Call:
    return Call("POST", "/v1/retrieve", model(m.RetrieveResult), json={"query": query, "top_k": top_k})


def answer(question: str) -> Call:
    return Call("POST", "/v1/answer", _answer_or_review, json={"question": question})


# ---------------------------------------------------------------------- conversations and runs
def create_conversation() -> Call:
    return Call("POST", "/v1/conversations", model(m.Conversation))


def delete_conversation(conversation_id: str) -> Call:
    return Call("DELETE", f"/v1/conversations/{_segment(conversation_id)}", model(m.ConversationDeleted))


def delete_my_data() -> Call:
    return Call("DELETE", "/v1/me/data", model(m.UserDataDeleted))


def post_message(conversation_id: str, content: str) -> Call:
    # The API takes no idempotency key here, so a message is never sent twice by the client.
    return Call("POST", f"/v1/conversations/{_segment(conversation_id)}/messages", model(m.RunStarted),
                json={"content": content})


def run(run_id: str) -> Call:
    return Call("GET", f"/v1/runs/{_segment(run_id)}", model(m.RunState), idempotent=True)


def cancel_run(run_id: str) -> Call:
    return Call("POST", f"/v1/runs/{_segment(run_id)}:cancel", model(m.CancelRequested))


def run_events(run_id: str, after_seq: int = 0) -> Call:
    return Call("GET", run_events_path(run_id), _events, params={"after_seq": after_seq},
                headers={"accept": "application/json"}, idempotent=True)


def run_events_path(run_id: str) -> str:
    return f"/v1/runs/{_segment(run_id)}/events"


def run_event_stream(run_id: str, headers: dict[str, str]) -> Call:
    """The run's events as Server-Sent Events (read line by line by the client, not parsed here)."""
    return Call("GET", run_events_path(run_id), lambda response: None, headers=headers, idempotent=True)


def feedback(answer_id: str, vote: str, reason: Optional[str], comment: str) -> Call:
    return Call("POST", f"/v1/answers/{_segment(answer_id)}/feedback", model(m.FeedbackRecorded),
                json={"vote": vote, "reason": reason, "comment": comment})


# ---------------------------------------------------------------------- approvals
def approvals(status: str) -> Call:
    return Call("GET", "/v1/approvals", _approvals, params={"status": status}, idempotent=True)


def decide(approval_id: str, decision: str, edits: Optional[dict[str, Any]], comment: str) -> Call:
    # Decided once (409 after), so never sent twice.
    return Call("POST", f"/v1/approvals/{_segment(approval_id)}:decide", model(m.Approval),
                json={"decision": decision, "edits": edits, "comment": comment})


# ---------------------------------------------------------------------- documents
def section(document_id: str, version: int, chunk_id: str, quote: Optional[str]) -> Call:
    path = f"{DOCUMENTS_PREFIX}{_segment(document_id)}/versions/{int(version)}/sections/" \
           f"{urllib.parse.quote(chunk_id, safe=':')}"
    return Call("GET", path, model(m.Section), params={"quote": quote} if quote else None, idempotent=True)


def open_citation(citation: Union[m.Citation, str]) -> Call:
    """A citation's `url` as the API gave it: a path of this deployment (never another host, so the
    credentials go nowhere else)."""
    url = citation.url if isinstance(citation, m.Citation) else citation
    if not url or not url.startswith(DOCUMENTS_PREFIX) or "//" in url or "\\" in url:
        raise ValueError(f"not a citation URL of this API: {url!r}")
    return Call("GET", url, model(m.Section), idempotent=True)


def raw_document(document_id: str, version: int) -> Call:
    return Call("GET", f"{DOCUMENTS_PREFIX}{_segment(document_id)}/versions/{int(version)}/raw",
                lambda response: response.content, idempotent=True)


def policy(policy_id: str) -> Call:
    return Call("GET", f"/v1/policies/{_segment(policy_id)}", model(m.Policy), idempotent=True)


# ---------------------------------------------------------------------- admin
def upload_document(tenant_id: str, document_id: str, filename: str, text: Optional[str],
                    content: Optional[bytes], groups: Iterable[str], fields: dict[str, Any],
                    idempotency_key: Optional[str]) -> Call:
    if (text is None) == (content is None):
        raise ValueError("give exactly one of text or content")
    body: dict[str, Any] = {"document_id": document_id, "filename": filename, "groups": list(groups),
                            **{k: v for k, v in fields.items() if v is not None}}
    if text is not None:
        body["text"] = text
    else:
        body["content_base64"] = base64.b64encode(content or b"").decode("ascii")
    return Call("POST", f"/v1/admin/tenants/{_segment(tenant_id)}/documents", model(m.JobStarted), json=body,
                headers=_keyed(idempotency_key), idempotent=True, as_user=False)


def job(job_id: str) -> Call:
    return Call("GET", f"/v1/admin/jobs/{_segment(job_id)}", model(m.Job), idempotent=True, as_user=False)


def withdraw_document(tenant_id: str, document_id: str, idempotency_key: Optional[str]) -> Call:
    return Call("POST", f"/v1/admin/tenants/{_segment(tenant_id)}/documents/{_segment(document_id)}/withdraw",
                model(m.Withdrawn), headers=_keyed(idempotency_key), idempotent=True, as_user=False)


def set_acl(tenant_id: str, document_id: str, groups: Iterable[str], idempotency_key: Optional[str]) -> Call:
    return Call("PUT", f"/v1/admin/tenants/{_segment(tenant_id)}/documents/{_segment(document_id)}/acl",
                model(m.AclSet), json={"groups": list(groups)}, headers=_keyed(idempotency_key), idempotent=True,
                as_user=False)


def kept_prompt(request_id: str) -> Call:
    return Call("GET", f"/v1/admin/prompts/{_segment(request_id)}", model(m.KeptPrompt), idempotent=True,
                as_user=False)


def tools() -> Call:
    return Call("GET", "/v1/admin/tools", model(m.ToolPauses), idempotent=True, as_user=False)


def pause_tool(target: str, tenant_id: Optional[str], resume: bool = False) -> Call:
    # Pausing twice leaves it paused: the same state either way, so it may be sent again.
    action = "resume" if resume else "pause"
    return Call("POST", f"/v1/admin/tools/{_segment(target)}:{action}", model(m.PauseState),
                json={"tenant_id": tenant_id}, idempotent=True, as_user=False)


def candidates(tenant_id: str, source: Optional[str], status: str, limit: int, after_id: int) -> Call:
    params = {"tenant": tenant_id, "status": status, "limit": limit, "after_id": after_id,
              **({"source": source} if source else {})}
    return Call("GET", "/v1/admin/candidates", model(m.CandidatePage), params=params, idempotent=True,
                as_user=False)


def promote_candidate(candidate_id: int, label: dict[str, Any]) -> Call:
    return Call("POST", f"/v1/admin/candidates/{int(candidate_id)}/promote", model(m.Candidate), json=label,
                as_user=False)


def dismiss_candidate(candidate_id: int) -> Call:
    return Call("POST", f"/v1/admin/candidates/{int(candidate_id)}/dismiss", model(m.Candidate), as_user=False)
