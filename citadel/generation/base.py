"""The Generator interface (DESIGN.md §6): question + numbered sources in, answer text with [n] out.

Two methods, both always present, so the answer service calls one and never inspects which kind of
generator it holds:
- `generate` returns the text;
- `generate_with_status` also says which model answered and what was given up on the way. A single
  backend answers itself with nothing given up (the default below); a composite (a primary with a
  secondary, citadel/resilience/guards.py) names the backend that answered and the downgrade.
A backend that cannot produce text raises `GeneratorError`; the service then falls back to the
extractive generator, visibly.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from citadel.answer.expand import Source
from citadel.errors import CitadelError

# `generate_with_status`: (text, model id of the backend that answered, downgrades such as
# "generator_secondary"). A tuple, so composites outside this room return it without importing a type.
GenerationStatus = tuple[str, str, list[str]]


class GeneratorError(CitadelError):
    """A backend could not produce text (unreachable server, bad response, missing model)."""

    code = "generator_failed"


@runtime_checkable
class Generator(Protocol):
    """Backends subclass this to inherit the single-backend `generate_with_status`."""

    model_id: str

    def generate(self, question: str, sources: Sequence[Source]) -> str:
        """Answer text with [n] markers that refer to `sources` by number, stripped of outer
        whitespace. Raises GeneratorError when the backend cannot answer."""

    def generate_with_status(self, question: str, sources: Sequence[Source]) -> GenerationStatus:
        """(text, model id, downgrades): a single backend answered itself, with nothing given up."""
        return self.generate(question, sources), self.model_id, []
