"""Clarifying questions: what the service says when the evidence is weak but present.

The calibrated gate's middle band, and a question too short to name a fact ("leave?", ""), get a
short question back instead of a guess: it names the sections the retrieval found (the user may read
them: every passage was ACL-scoped and live-checked) and offers a person. No sentence of the
passages is quoted — the gate did not accept them as an answer.
"""

from __future__ import annotations

from typing import Sequence

from citadel.guardrails.router import DEFAULT_REPLIES, NEEDS_CLARIFICATION
from citadel.types import Passage

MAX_CANDIDATES = 3
MAX_NAME_CHARS = 80
OFFER_A_PERSON = "or ask to be put in touch with a person who can help."
# Nothing matched, or nothing to search for: the router's reply to an empty question.
GENERIC = DEFAULT_REPLIES[NEEDS_CLARIFICATION]


def candidate_sections(passages: Sequence[Passage], limit: int = MAX_CANDIDATES) -> list[str]:
    """Distinct section names of the top passages, best first: "Annual leave (Leave)"."""
    names: list[str] = []
    for passage in passages:
        section = passage.section_title.strip() or passage.title
        title = (passage.title or "").strip()
        name = section if not title or title == section else f"{section} ({title})"
        name = name[:MAX_NAME_CHARS]
        if name and name not in names:
            names.append(name)
        if len(names) == limit:
            break
    return names


def clarifying_question(passages: Sequence[Passage]) -> str:
    names = candidate_sections(passages)
    if not names:
        return GENERIC
    listed = "; ".join(f'"{n}"' for n in names)
    return (f"I could not find a clear answer to that. These sections may be related: {listed}. Which one "
            f"matches what you need? You can also tell me more about your situation, {OFFER_A_PERSON}")
