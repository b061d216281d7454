"""Synthetic tenants of realistic Markdown documents for ingestion benchmarks (`citadel synth`).

Tenant sizes follow a Zipf law (many small tenants, a few large ones), optionally with the largest
sizes pinned (`large`) and the rest capped (`small_cap`) so a benchmark controls which tiers appear.
Each document has front matter, an H1 title and H2/H3 sections of prose (Zipf-distributed words,
some figures), bullet lists and some tables. Every section is shorter than a chunk, so one section is
exactly one chunk and a tenant's chunk count is exact: the manifest records it per document.

Output: `<out>/tenants/<tenant>/<doc>.md` and `<out>/manifest.parquet` (tenant_id, document_id,
source relative to the manifest, groups, version, chunks), the pipeline's document records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MANIFEST_NAME = "manifest.parquet"
TENANTS_DIR = "tenants"
DEFAULT_ZIPF_EXPONENT = 1.1
MIN_TENANT_CHUNKS = 3
SECTIONS_PER_DOCUMENT = (3, 24)  # uniform range of sections (= chunks) per document
SENTENCES_PER_SECTION = (3, 8)
WORDS_PER_SENTENCE = (5, 11)  # 8 sentences of 10 words (made-up words: ~2.5 wordpieces) stay under a chunk
TABLE_SHARE = 0.12
LIST_SHARE = 0.15
SUBSECTION_SHARE = 0.2  # sections written as H3 under the previous H2
TABLE_ROWS = (3, 6)
VOCABULARY_SIZE = 6000
WORD_ZIPF_EXPONENT = 1.05
TOPICS = 400  # shared by all tenants; each document is about one
TOPIC_WORDS = 300  # content words of one topic
FUNCTION_WORD_SHARE = 0.35
FIGURE_SHARE = 0.03  # words replaced by a figure ("25 days", "220 USD")
SYLLABLES = ("ka", "lo", "ri", "ten", "mar", "vi", "sol", "den", "pa", "qua", "ber", "ni", "tor", "el",
             "an", "mu", "ster", "gra", "fi", "con", "dal", "ori", "ves", "lin")
FUNCTION_WORDS = ("the", "of", "and", "to", "a", "in", "for", "is", "on", "that", "by", "with", "as", "are",
                  "be", "at", "or", "from", "this", "it", "an", "will", "must", "may", "each", "any", "all")
DOMAIN_WORDS = (
    "policy", "leave", "travel", "expense", "approval", "manager", "employee", "contractor", "security",
    "access", "review", "budget", "invoice", "vendor", "request", "account", "device", "password", "incident",
    "report", "training", "benefit", "payroll", "holiday", "office", "remote", "hardware", "software", "data",
    "privacy", "retention", "audit", "compliance", "onboarding", "offboarding", "procurement", "contract",
    "allowance", "reimbursement", "limit", "deadline", "quarter", "team", "department", "customer", "support",
    "escalation", "release", "deployment", "service", "license", "hotel", "flight", "meal", "receipt",
)
HEADING_WORDS = (
    "Overview", "Scope", "Eligibility", "Process", "Requirements", "Exceptions", "Responsibilities", "Limits",
    "Approvals", "Timelines", "Reporting", "Escalation", "Records", "Definitions", "Review", "Contacts",
)
UNITS = ("days", "USD", "hours", "percent", "weeks", "EUR")
GROUP_CHOICES = ((("*",), 0.5), (("staff",), 0.3), (("staff", "managers"), 0.15), (("finance",), 0.05))
OWNERS = ("people-ops", "finance", "security", "it", "legal", "facilities")


@dataclass(frozen=True)
class SynthSpec:
    tenants: int
    chunks: int
    seed: int = 0
    zipf_exponent: float = DEFAULT_ZIPF_EXPONENT
    large: tuple[int, ...] = ()  # exact chunk counts of the largest tenants
    small_cap: int | None = None  # no other tenant gets more than this many chunks


@dataclass
class SynthResult:
    out_dir: Path
    manifest: Path
    tenant_chunks: dict[str, int]
    documents: int
    bytes_written: int
    large_tenants: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        sizes = sorted(self.tenant_chunks.values(), reverse=True)
        return {"out_dir": str(self.out_dir), "manifest": str(self.manifest), "tenants": len(sizes),
                "chunks": sum(sizes), "documents": self.documents, "bytes": self.bytes_written,
                "largest": sizes[:8], "smallest": sizes[-3:], "large_tenants": self.large_tenants}


# ------------------------------------------------------------------------------------ tenant sizes
def tenant_sizes(spec: SynthSpec) -> list[int]:
    """Chunks per tenant, largest first, summing exactly to `spec.chunks`."""
    rest_tenants = spec.tenants - len(spec.large)
    rest_chunks = spec.chunks - sum(spec.large)
    if rest_tenants < 0:
        raise ValueError(f"{len(spec.large)} large tenants but only {spec.tenants} tenants")
    if rest_tenants == 0:
        if rest_chunks != 0:
            raise ValueError("the large tenants must sum to --chunks when there are no others")
        return sorted(spec.large, reverse=True)
    if rest_chunks < MIN_TENANT_CHUNKS * rest_tenants:
        raise ValueError(f"{rest_chunks} chunks cannot give {rest_tenants} tenants {MIN_TENANT_CHUNKS} each")
    cap = spec.small_cap or rest_chunks
    if cap * rest_tenants < rest_chunks:
        raise ValueError(f"{rest_tenants} tenants capped at {cap} cannot hold {rest_chunks} chunks")
    weights = 1.0 / np.arange(1, rest_tenants + 1, dtype=np.float64) ** spec.zipf_exponent
    shares = _water_fill(weights, rest_chunks, cap)
    return sorted(spec.large, reverse=True) + _round_preserving_total(shares, rest_chunks, cap)


def _water_fill(weights: np.ndarray, total: int, cap: int) -> np.ndarray:
    """Split `total` in proportion to `weights` above a floor, no share over `cap`: capped shares
    are fixed and what they shed is re-split among the others until none exceeds the cap."""
    floor = float(MIN_TENANT_CHUNKS)
    shares = np.full(len(weights), floor)
    free = np.ones(len(weights), dtype=bool)
    remaining = total - floor * len(weights)
    while True:
        shares[free] = floor + remaining * weights[free] / weights[free].sum()
        over = free & (shares > cap)
        if not over.any():
            return shares
        shares[over] = cap
        free &= ~over
        remaining = total - shares[~free].sum() - floor * free.sum()


def _round_preserving_total(shares: np.ndarray, total: int, cap: int) -> list[int]:
    """Largest-remainder rounding: integers that still sum to `total` and respect the cap."""
    counts = np.floor(shares).astype(np.int64)
    order = np.argsort(-(shares - counts), kind="stable")
    short = total - int(counts.sum())
    for index in order:
        if short == 0:
            break
        if counts[index] < cap:
            counts[index] += 1
            short -= 1
    return [int(c) for c in counts]


def tenant_name(rank: int) -> str:
    return f"tenant-{rank:05d}"


# --------------------------------------------------------------------------------------- text
class _TextSource:
    """Deterministic prose: each document is about one topic (a few hundred content words, Zipf-
    distributed), mixed with common function words, plus some figures.

    Topics matter beyond realism: text drawn from one flat vocabulary makes every pair of chunks about
    equally similar, and on such vectors HNSW cannot even find a chunk by its own vector (measured:
    8% of 3,000 missed at efSearch 64), which real embeddings of real documents never look like.
    """

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self._function = np.array(FUNCTION_WORDS, dtype=object)
        self._content = np.array(list(DOMAIN_WORDS) + _pseudo_words(VOCABULARY_SIZE), dtype=object)
        self._function_cdf = _zipf_cdf(len(self._function))
        self._topic_cdf = _zipf_cdf(TOPIC_WORDS)
        self._topics = [rng.choice(len(self._content), TOPIC_WORDS, replace=False) for _ in range(TOPICS)]
        self.topic = self._topics[0]

    def pick_topic(self) -> None:
        self.topic = self._topics[int(self.rng.integers(TOPICS))]

    def words(self, count: int) -> list[str]:
        function = self._function[_draw(self.rng, self._function_cdf, count)]
        content = self._content[self.topic[_draw(self.rng, self._topic_cdf, count)]]
        words = np.where(self.rng.random(count) < FUNCTION_WORD_SHARE, function, content).tolist()
        for position in np.flatnonzero(self.rng.random(count) < FIGURE_SHARE).tolist():
            words[position] = self.figure()
        return words

    def figure(self) -> str:
        return f"{int(self.rng.integers(1, 500))} {UNITS[int(self.rng.integers(len(UNITS)))]}"

    def sentence(self) -> str:
        sentence = " ".join(self.words(int(self.rng.integers(*WORDS_PER_SENTENCE))))
        return sentence[0].upper() + sentence[1:] + "."

    def paragraph(self, sentences: int) -> str:
        return " ".join(self.sentence() for _ in range(sentences))

    def heading(self) -> str:
        first = HEADING_WORDS[int(self.rng.integers(len(HEADING_WORDS)))]
        content = self._content[self.topic[_draw(self.rng, self._topic_cdf, 2)]].tolist()
        return f"{first} of {' '.join(content)}".title()

    def choice(self, options: tuple, weights: tuple | None = None):
        probabilities = None if weights is None else np.asarray(weights) / sum(weights)
        return options[int(self.rng.choice(len(options), p=probabilities))]


def _zipf_cdf(size: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, size + 1, dtype=np.float64) ** WORD_ZIPF_EXPONENT
    return np.cumsum(weights / weights.sum())


def _draw(rng: np.random.Generator, cdf: np.ndarray, count: int) -> np.ndarray:
    """`count` ranks drawn from a cumulative distribution."""
    return np.minimum(np.searchsorted(cdf, rng.random(count)), len(cdf) - 1)


def _pseudo_words(count: int) -> list[str]:
    """Pronounceable made-up words (2-3 syllables), the same list on every machine."""
    words, size = [], len(SYLLABLES)
    for index in range(count):
        first, second, third = index % size, (index // size) % size, (index // size**2) % size
        word = SYLLABLES[first] + SYLLABLES[second] + (SYLLABLES[third] if index >= size * size else "")
        words.append(word)
    return words


def document_markdown(text: _TextSource, title: str, sections: int) -> str:
    """One document, about the current topic, with exactly `sections` chunk-sized sections."""
    owner = text.choice(OWNERS)
    lines = ["---", f"title: {title}", f"owner: {owner}", "---", "", f"# {title}", ""]
    for index in range(sections):
        level = "###" if index and text.rng.random() < SUBSECTION_SHARE else "##"
        lines += [f"{level} {text.heading()}", ""]
        lines += _section_body(text)
    return "\n".join(lines)


def _section_body(text: _TextSource) -> list[str]:
    kind = text.rng.random()
    body = [text.paragraph(int(text.rng.integers(*SENTENCES_PER_SECTION)) // 2 + 1), ""]
    if kind < TABLE_SHARE:
        body += _table(text) + [""]
    elif kind < TABLE_SHARE + LIST_SHARE:
        body += [f"- {text.sentence()}" for _ in range(int(text.rng.integers(3, 6)))] + [""]
    else:
        body += [text.paragraph(int(text.rng.integers(*SENTENCES_PER_SECTION)) // 2 + 1), ""]
    return body


def _table(text: _TextSource) -> list[str]:
    header = ["Item", "Limit", "Owner"]
    rows = [f"| {' '.join(text.words(2)).title()} | {text.figure()} | {text.choice(OWNERS)} |"
            for _ in range(int(text.rng.integers(*TABLE_ROWS)))]
    return [f"| {' | '.join(header)} |", "|---|---|---|"] + rows


def document_sizes(rng: np.random.Generator, tenant_chunks: int) -> Iterator[int]:
    """Sections per document until the tenant's chunks are used up exactly."""
    left = tenant_chunks
    while left > 0:
        size = min(left, int(rng.integers(SECTIONS_PER_DOCUMENT[0], SECTIONS_PER_DOCUMENT[1] + 1)))
        left -= size
        yield size


# ----------------------------------------------------------------------------------------- write
def generate(spec: SynthSpec, out_dir: Path, progress: Callable[[str, int, int], None] | None = None) -> SynthResult:
    """Write every tenant's documents and the manifest; deterministic for a given spec."""
    out_dir = Path(out_dir)
    sizes = tenant_sizes(spec)
    rng = np.random.default_rng(spec.seed)
    text = _TextSource(rng)
    records: dict[str, list] = {"tenant_id": [], "document_id": [], "source": [], "groups": [], "version": [],
                                "chunks": []}
    written = 0
    done = 0
    for rank, chunks in enumerate(sizes):
        tenant_id = tenant_name(rank)
        tenant_dir = out_dir / TENANTS_DIR / tenant_id
        tenant_dir.mkdir(parents=True, exist_ok=True)
        for number, sections in enumerate(document_sizes(rng, chunks)):
            document_id = f"doc-{number:05d}"
            text.pick_topic()
            title = f"{text.choice(DOMAIN_WORDS).title()} {text.choice(HEADING_WORDS)} {number}"
            data = document_markdown(text, title, sections).encode()
            (tenant_dir / f"{document_id}.md").write_bytes(data)
            written += len(data)
            groups = text.choice(tuple(g for g, _ in GROUP_CHOICES), tuple(w for _, w in GROUP_CHOICES))
            for key, value in (("tenant_id", tenant_id), ("document_id", document_id),
                               ("source", f"{TENANTS_DIR}/{tenant_id}/{document_id}.md"), ("groups", list(groups)),
                               ("version", None), ("chunks", sections)):
                records[key].append(value)
        done += chunks
        if progress:
            progress("synth", done, spec.chunks)
    manifest = out_dir / MANIFEST_NAME
    pq.write_table(pa.table(records, schema=MANIFEST_SCHEMA), manifest)
    tenant_chunks = {tenant_name(rank): size for rank, size in enumerate(sizes)}
    return SynthResult(out_dir, manifest, tenant_chunks, len(records["document_id"]), written,
                       [tenant_name(rank) for rank in range(len(spec.large))])


MANIFEST_SCHEMA = pa.schema([
    ("tenant_id", pa.string()),
    ("document_id", pa.string()),
    ("source", pa.string()),
    ("groups", pa.list_(pa.string())),
    ("version", pa.int32()),
    ("chunks", pa.int32()),
])

