"""The documents family's response bodies."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, Field

from serving.http.protocol import ResponseBody


class Governance(BaseModel):
    """What the trusted catalog states of the document version (the ACL file or the admin API; never
    the document's own content)."""

    policy_id: Optional[str] = Field(None, description="The policy this document is, if it is one.")
    policy_revision: Optional[str] = None
    sensitivity: Optional[str] = Field(None, description="One of governance.sensitivities.")
    retention_class: Optional[str] = Field(None, description="One of governance.retention_classes.")


class QuotedSentence(BaseModel):
    text: str
    start: int = Field(..., description="Offset of the sentence in `text` (characters).")
    end: int = Field(..., description="Offset just past it.")


class SectionBody(ResponseBody, Governance):
    document_id: str
    version: int
    chunk_id: str
    title: str
    heading: str = Field(..., description="The heading path joined by ' > '.")
    heading_path: list[str]
    page: Optional[int] = Field(..., description="1-based PDF page; null for Markdown and text.")
    source: str
    text: str = Field(..., description="The whole section the chunk belongs to.")
    marked_text: str = Field(..., description="`text` with the quoted sentence between << and >> (as `text` "
                                              "when none is marked).")
    truncated: bool = Field(..., description="The section was longer than the reply holds.")
    quote: Optional[QuotedSentence] = Field(..., description="The sentence the citation's answer quoted, when "
                                                             "the URL names one and the section holds it.")
    url: str = Field(..., description="This section's URL, without the quote.")


class PolicyBody(ResponseBody, Governance):
    document_id: str
    version: int
    title: str
    owner: str
    effective_date: Optional[str]
