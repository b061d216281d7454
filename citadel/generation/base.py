"""The Generator interface (DESIGN.md §6): question + numbered sources in, answer text with [n] out.

Three methods, all always present, so the answer service calls one and never inspects which kind of
generator it holds:
- `generate` returns the text;
- `generate_with_status` also says which model answered and what was given up on the way. A single
  backend answers itself with nothing given up (the default below); a composite (a primary with a
  secondary, citadel/resilience/guards.py) names the backend that answered and the downgrade;
- `count_tokens` measures a text as this generator's model will read it, so prompt assembly
  (citadel/prompting/prompt.py) holds its allowances and its whole-prompt cap in the model's own units.
  A backend with a tokenizer at hand counts exactly (the packaged SmolLM2); one without (extractive,
  an OpenAI-compatible server whose tokenizer is not here) uses `approximate_tokens`, a deliberate
  overestimate. A composite counts with its primary.
A backend that cannot produce text raises `GeneratorError`; the service then falls back to the
extractive generator, visibly. A backend that measures its calls keeps `last_stats` per thread (one
generator serves concurrent requests); `prompt_token_counts` reads the cached and uncached prompt
tokens from it where the backend said them.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Protocol, Sequence, runtime_checkable

from citadel.chunking import count_tokens as words_and_marks
from citadel.errors import GeneratorError
from citadel.prompting.prompt import AssembledPrompt
from citadel.prompting.source import Source

# Sub-word tokenizers (BPE, SentencePiece) split English prose into ~1.3 tokens per word. Applied to
# words AND punctuation marks (the chunker's count), it overestimates prose a little, which is the
# safe side for a cap; long digit runs (a tokenizer may split every digit) are the known undercount.
# Measured against SmolLM2's tokenizer on 400 handbook pages: 12% over in total; 1 page in 8 under,
# at worst by 1.6× (link- and markup-heavy pages). The default allowances leave 2k of the 32k cap spare.
APPROX_TOKENS_PER_WORD = 1.3

# `generate_with_status`: (text, model id of the backend that answered, downgrades such as
# "generator_secondary"). A tuple, so composites outside this room return it without importing a type.
GenerationStatus = tuple[str, str, list[str]]


@runtime_checkable
class Generator(Protocol):
    """Backends subclass this to inherit the single-backend `generate_with_status`."""

    model_id: str

    def generate(self, question: str, sources: Sequence[Source], prompt: AssembledPrompt | None = None) -> str:
        """Answer text with [n] markers that refer to `sources` by number, stripped of outer
        whitespace. `prompt`: the budgeted prompt of an agentic run (citadel/prompting/prompt.py: the
        conversation, the user's notes, the tagged sources, the task), which a model backend sends
        instead of building its own from the question and sources. Raises GeneratorError when the
        backend cannot answer."""

    def generate_with_status(self, question: str, sources: Sequence[Source],
                             prompt: AssembledPrompt | None = None) -> GenerationStatus:
        """(text, model id, downgrades): a single backend answered itself, with nothing given up."""
        return self.generate(question, sources, prompt), self.model_id, []

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` as this backend's model reads it (no special tokens); by default the
        documented approximation, overridden by a backend that has its tokenizer."""
        return approximate_tokens(text)


def approximate_tokens(text: str) -> int:
    """Words and punctuation marks × APPROX_TOKENS_PER_WORD, rounded up: a model-free estimate for a
    backend whose tokenizer is not available here."""
    return math.ceil(words_and_marks(text) * APPROX_TOKENS_PER_WORD)


class ThreadStats:
    """What a backend measured on its last call on this thread: concurrent requests share one
    generator, so one request must never read another's counts."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self) -> dict[str, Any]:
        return dict(getattr(self._local, "stats", {}))

    def set(self, stats: dict[str, Any]) -> None:
        self._local.stats = dict(stats)

    def clear(self) -> None:
        self._local.stats = {}


def prompt_token_counts(generator: object) -> dict[str, int] | None:
    """{"cached": n, "uncached": m}: the prompt tokens of the generator's last call on this thread that
    the model server served from its prefix cache and that it computed, when the backend said them
    (`last_stats`); None otherwise (the extractive generator, a remote stage, a server without usage)."""
    stats = getattr(generator, "last_stats", None) or {}
    cached, uncached = stats.get("cached_prompt_tokens"), stats.get("uncached_prompt_tokens")
    if not isinstance(cached, int) or not isinstance(uncached, int):
        return None
    return {"cached": cached, "uncached": uncached}
