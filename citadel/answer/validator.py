"""The answer validator (DESIGN.md §4 step 7): only supported, correctly cited text leaves the server.

Sentence by sentence:
1. citation markers that do not name a retrieved source are removed;
2. the sentence must be supported by its cited sources (a share of its content terms found in
   them, or — with `semantic` — its meaning matched to a source's passage through the embedder, so a
   paraphrase is support without shared words); a sentence that cites nothing, or cites the wrong
   source, is attributed to the source that supports it best, and dropped when none does;
3. links and e-mail addresses that the supporting sources do not contain are removed, and a
   sentence stating a figure the sources do not contain is dropped (a claim with an invented
   number is a wrong claim; deleting just the number would leave a misleading one).
When nothing survives, the answer falls back to quoting the top evidence with its marker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from citadel import regex
from citadel.answer.expand import source_terms
from citadel.answer.extractive import select_evidence
from citadel.answer.quantities import parse_figure
from citadel.answer.semantic import ClaimSupport
from citadel.prompting.source import Source
from citadel.text import LIST_BULLET, content_terms, sentence_pieces

MARKER = regex.compile("answer.validator.marker", r"\[(\d+(?:\s*[,;]\s*\d+)*)\]")
# Small models write "source 2" or "[Source 2]" instead of "[2]"; read those as markers, or their
# number would count as an invented figure.
SOURCE_MENTION = regex.compile(
    "answer.validator.source_mention", r"\b(?:according to\s+(?:the\s+)?)?\[?\bsources?\s+(\d+)\]?,?", regex.IGNORECASE
)
LEADING_MARKERS = regex.compile("answer.validator.leading_markers", r"^(?:\s*\[\d+(?:\s*[,;]\s*\d+)*\])+")
URL = regex.compile("answer.validator.url", r"(?:https?://|www\.)[^\s<>\"'\]\)]+", regex.IGNORECASE)
EMAIL = regex.compile("answer.validator.email", r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# Figures: amounts, counts, percentages, dates' numbers. Not preceded by a letter or digit so
# "v2" or "SHA256" are words, not figures; the same pattern reads the sources, so forms agree.
# (The character before is matched, or the text's edge, and `figures` resumes after each figure.)
FIGURE = regex.compile("answer.validator.figure", r"(?:^|[^\w.])(?P<figure>[$€£]?\d[\d,]*(?:\.\d+)?%?)")
# Whitespace after ".", "!" or "?", or line breaks: the cut is the whitespace.
ANSWER_BREAK = regex.compile("answer.validator.answer_break", r"[.!?](?P<cut>\s+)|(?P<lines>\n+)")
MARKER_LIST_SEPARATOR = regex.compile("answer.validator.marker_list_separator", r"\s*[,;]\s*")
SPACE_BEFORE_PUNCTUATION = regex.compile("answer.validator.space_before_punctuation", r"\s+([.,;:!?])")
SPACE_RUN = regex.compile("answer.validator.space_run", r"\s{2,}")
TRAILING_PUNCTUATION = regex.compile("answer.validator.trailing_punctuation", r"[.!?]+$")
URL_TRAILING = ".,;:"
DEFAULT_MIN_SUPPORT = 0.5


@dataclass
class ValidatedAnswer:
    text: str
    used: list[int]
    fallback: bool = False
    removed: dict[str, int] = field(default_factory=lambda: {"markers": 0, "links": 0, "figures": 0,
                                                              "sentences": 0})


def split_claims(text: str) -> list[str]:
    """Answer sentences, each keeping the markers written right after its full stop."""
    claims: list[str] = []
    for piece in (p.strip() for p in ANSWER_BREAK.split_at(text, "cut", "lines")):
        leading = LEADING_MARKERS.match(piece)
        if leading and claims:
            claims[-1] = f"{claims[-1]} {leading.group(0).strip()}"
            piece = piece[leading.end():].strip()
        piece = LIST_BULLET.sub("", piece).strip()
        if piece:
            claims.append(piece)
    return claims


def marker_numbers(claim: str) -> list[int]:
    return [int(n) for group in MARKER.findall(claim) for n in MARKER_LIST_SEPARATOR.split(group)]


def strip_markers(claim: str) -> str:
    text = MARKER.sub("", claim)
    text = SPACE_BEFORE_PUNCTUATION.sub(r"\1", text)
    text = SPACE_RUN.sub(" ", text).strip()
    return text[:1].upper() + text[1:]  # "[1] travel needs..." lost its first word to the marker


def figure_value(token: str) -> str:
    """A figure without currency, grouping or percent signs, so "$1,000" matches "1000"."""
    value = parse_figure(token)
    return repr(value) if value is not None else token.strip("$€£%").replace(",", "")


class AnswerValidator:
    def __init__(self, min_support: float = DEFAULT_MIN_SUPPORT):
        self.min_support = min_support

    def validate(self, question: str, answer: str, sources: Sequence[Source],
                 semantic: ClaimSupport | None = None, computed: Mapping[str, str] | None = None) -> ValidatedAnswer:
        """`semantic`: support by meaning for a claim that lexical overlap does not support. `computed`:
        figures code derived from a claim's cited sources (the claim verifier's durations and totals,
        citadel/quality/verifier.py), by the claim's lowercased text without markers: evidence for
        that claim's figure check, since a derived figure is not written in the source."""
        by_number = {s.number: s for s in sources}
        terms_of = {s.number: source_terms(s) for s in sources}
        result = ValidatedAnswer("", [])
        kept: list[str] = []
        seen_bodies: set[str] = set()
        for claim in split_claims(SOURCE_MENTION.sub(r"[\1]", answer)):
            checked = self._check_claim(claim, by_number, terms_of, result, semantic, computed or {})
            if checked is None or checked[0].lower() in seen_bodies:
                continue
            body, numbers = checked
            seen_bodies.add(body.lower())
            kept.append(claim if keeps_own_markers(claim, body, numbers) else with_markers(body, numbers))
            result.used.extend(n for n in numbers if n not in result.used)
        if kept:
            result.text = " ".join(kept)
            return result
        return self.fallback(question, sources, result)

    def _check_claim(self, claim: str, by_number: dict[int, Source], source_terms: dict[int, set[str]],
                     result: ValidatedAnswer, semantic: ClaimSupport | None = None,
                     computed: Mapping[str, str] = {}) -> tuple[str, list[int]] | None:
        numbers = marker_numbers(claim)
        valid = list(dict.fromkeys(n for n in numbers if n in by_number))
        result.removed["markers"] += len(numbers) - len([n for n in numbers if n in by_number])
        body = strip_markers(claim)
        derived = computed.get(body.lower(), "").lower()
        supporting = self._supporting_sources(body, valid, source_terms, set(content_terms(derived)))
        if not supporting and semantic is not None and content_terms(body):
            supporting = _semantic_sources(semantic.supporting(strip_links(body)), valid)
        if not supporting:
            result.removed["sentences"] += 1
            return None
        evidence = "\n".join(by_number[n].text for n in supporting).lower()
        body, links_removed = remove_unsupported_links(body, evidence)
        result.removed["links"] += links_removed
        if has_unsupported_figure(body, f"{evidence}\n{derived}"):
            result.removed["figures"] += 1
            return None
        if not content_terms(body):
            result.removed["sentences"] += 1
            return None
        return body, supporting

    def _supporting_sources(self, body: str, cited: list[int], source_terms: dict[int, set[str]],
                            derived: set[str] = frozenset()) -> list[int]:
        """The cited sources when together they support the sentence (with `derived`: the terms of
        what code computed from them), else the single best source that does, else none."""
        terms = set(content_terms(strip_links(body)))
        if not terms:
            return []

        def support(numbers: list[int]) -> float:
            found = set().union(derived, *(source_terms[n] for n in numbers)) if numbers else set()
            return len(terms & found) / len(terms)

        if cited and support(cited) >= self.min_support:
            return cited
        best = max(source_terms, key=lambda n: (support([n]), -n), default=None)
        return [best] if best is not None and support([best]) >= self.min_support else []

    @staticmethod
    def fallback(question: str, sources: Sequence[Source], result: ValidatedAnswer) -> ValidatedAnswer:
        """Nothing of the answer survived (its checks, or the claim verifier): quote the top evidence
        with its marker, a quote being its own support."""
        result.fallback = True
        if not sources:
            return result
        top = sources[0]
        evidence = select_evidence(question, [top], max_sentences=1)
        result.text = with_markers(evidence[0].text, [top.number]) if evidence else with_markers(
            top.text.strip(), [top.number])
        result.used = [top.number]
        return result


def _semantic_sources(matching: list[int], cited: list[int]) -> list[int]:
    """The cited sources that match in meaning when there are any, else the closest matching one."""
    cited_matches = [n for n in cited if n in matching]
    return cited_matches or matching[:1]


def strip_links(text: str) -> str:
    return EMAIL.sub(" ", URL.sub(" ", text))


def remove_unsupported_links(body: str, evidence: str) -> tuple[str, int]:
    """Remove URLs and e-mail addresses that do not occur in the evidence text (lowercased)."""
    removed = 0

    def keep_or_drop(match: object) -> str:
        nonlocal removed
        link = match.group(0).rstrip(URL_TRAILING)
        trailing = match.group(0)[len(link):]
        if link.lower() in evidence:
            return match.group(0)
        removed += 1
        return trailing

    body = URL.sub(keep_or_drop, body)
    body = EMAIL.sub(keep_or_drop, body)
    body = SPACE_BEFORE_PUNCTUATION.sub(r"\1", SPACE_RUN.sub(" ", body)).strip()
    return body, removed


def has_unsupported_figure(body: str, evidence: str) -> bool:
    stated = {figure_value(m.group("figure")) for m in FIGURE.scan(strip_links(body), resume="figure")}
    if not stated:
        return False
    present = {figure_value(m.group("figure")) for m in FIGURE.scan(evidence, resume="figure")}
    return not stated <= present


def keeps_own_markers(claim: str, body: str, numbers: Sequence[int]) -> bool:
    """Whether a kept sentence keeps its markers where its writer put them: inside it (a decision
    cites each operand of its comparisons where it stands), each naming a source, together the
    sources that support it, and nothing removed from it. Otherwise its markers go to its end."""
    first = MARKER.search(claim)
    return (first is not None and first.start() > 0 and bool(content_terms(claim[first.end():]))
            and list(dict.fromkeys(marker_numbers(claim))) == list(numbers) and strip_markers(claim) == body)


def with_markers(body: str, numbers: Sequence[int]) -> str:
    """`body [1][2].`: markers before the closing punctuation, so they read as part of the sentence."""
    markers = "".join(f"[{n}]" for n in numbers)
    match = TRAILING_PUNCTUATION.search(body)
    if match:
        return f"{body[:match.start()].rstrip()} {markers}{match.group(0)}"
    return f"{body} {markers}"


# A sentence shorter than this is not taken as quoted: a short phrase ("Yes.") matches by chance.
MIN_QUOTED_CHARS = 20


def quoted_sentence(answer: str, source_text: str) -> str | None:
    """The first sentence of a source that the answer repeats word for word (the extractive
    generator quotes; a generated answer may too), its [n] markers aside, for its citation to mark
    (citadel.types.section_url); None when none is."""
    said = " ".join(" ".join(strip_markers(claim).split()) for claim in split_claims(answer))
    for sentence, _ in sentence_pieces(source_text):
        plain = " ".join(sentence.split())
        if len(plain) >= MIN_QUOTED_CHARS and plain in said:
            return sentence
    return None


def renumber_markers(text: str, mapping: dict[int, int]) -> str:
    """Rewrite `[n]` markers through `mapping` (source number → citation number)."""
    def rewrite(match: object) -> str:
        numbers = [mapping[int(n)] for n in MARKER_LIST_SEPARATOR.split(match.group(1)) if int(n) in mapping]
        return "".join(f"[{n}]" for n in numbers)

    return MARKER.sub(rewrite, text)
