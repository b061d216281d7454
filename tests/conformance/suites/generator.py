"""The Generator suite (citadel/generation/base.py).

The contract the answer service relies on: `generate` returns stripped text, the same for the same
input; `generate_with_status` returns that text with the model id that answered and no downgrade
for a single backend; a backend that cannot answer raises `GeneratorError` (the service then falls
back, visibly). Backends that quote or cite (`grounded = True`) only cite the numbers they were given
and answer in the sources' words; SmolLM2 does neither reliably, which is why the validator exists.
"""

from __future__ import annotations

import re

import pytest

from citadel.generation.base import Generator, GeneratorError
from citadel.prompting.source import Source
from citadel.text import content_terms
from citadel.types import Passage

QUESTION = "Who approves travel for contractors?"
TEXTS = [
    "Contractors need approval from the contracting officer. Employees need approval from their manager.",
    "Flights are booked through the travel desk at least 14 days before departure.",
    "The per diem for meals is 75 USD per day in domestic cities.",
]
MARKER = re.compile(r"\[(\d+)\]")


def make_sources() -> list[Source]:
    return [Source(n, Passage(f"t:d{n}:v1:0000", text, f"d{n}", f"Policy {n}", 1, f"Policy {n} > Rules", None,
                              f"d{n}.md", 1.0 / n), text, len(text.split()))
            for n, text in enumerate(TEXTS, start=1)]


class GeneratorConformance:
    """Override `backend` (class-scoped) with the generator under test, and `broken` with one that
    cannot answer where something it needs can be missing; `grounded`: it quotes or cites only what
    it was given."""

    grounded = True

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls) -> Generator:
        raise NotImplementedError("a conformance subclass provides the generator under test")

    @pytest.fixture
    def broken(self) -> Generator:
        pytest.skip("this backend needs nothing that can be missing")

    @pytest.fixture(scope="class")
    @classmethod
    def answer(cls, backend) -> str:
        return backend.generate(QUESTION, make_sources())

    def test_implements_protocol(self, backend):
        assert isinstance(backend, Generator)
        assert isinstance(backend.model_id, str) and backend.model_id

    def test_returns_stripped_text(self, answer):
        assert isinstance(answer, str) and answer and answer == answer.strip()

    def test_deterministic_for_the_same_input(self, backend, answer):
        assert backend.generate(QUESTION, make_sources()) == answer
        assert backend.generate(QUESTION, tuple(make_sources())) == answer, "any sequence of sources"

    def test_status_names_the_model_that_answered_and_no_downgrade(self, backend, answer):
        text, model_id, downgrades = backend.generate_with_status(QUESTION, make_sources())
        assert (text, model_id, list(downgrades)) == (answer, backend.model_id, [])

    def test_grounded_backends_cite_only_given_sources_in_their_words(self, answer):
        if not self.grounded:
            pytest.skip("this backend neither quotes nor cites reliably (the validator handles it)")
        cited = {int(n) for n in MARKER.findall(answer)}
        assert cited and cited <= {s.number for s in make_sources()}, answer
        source_terms = set().union(*(content_terms(t) for t in TEXTS))
        answer_terms = set(content_terms(MARKER.sub(" ", answer)))
        assert answer_terms and answer_terms <= source_terms, answer_terms - source_terms

    def test_a_backend_that_cannot_answer_raises_generator_error(self, broken):
        assert isinstance(broken, Generator)
        with pytest.raises(GeneratorError):
            broken.generate(QUESTION, make_sources())
        with pytest.raises(GeneratorError):
            broken.generate_with_status(QUESTION, make_sources())
