"""The Reader protocol: P(the text states the answer to the question) for a batch of texts.

A reader scores; it never decides. The answer path reranks with its scores, quotes the sentences it
scores highest, and decides answerability from the asked slot (citadel/answer/slots.py) with the
reader's score as one signal. Every input is bounded here, before any backend sees it.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from citadel.errors import ReaderError

# A question longer than this is cut before scoring: the model reads at most a few hundred tokens,
# and a 10,000-character question must cost what a normal one costs.
MAX_QUESTION_CHARS = 512
# A text is cut to this many characters before tokenising (the model truncates to its own limit).
MAX_TEXT_CHARS = 2_000
# At most this many texts in one call; more is a caller's bug, not a bigger batch.
MAX_TEXTS = 512


@runtime_checkable
class Reader(Protocol):
    model_id: str

    def score(self, question: str, texts: Sequence[str]) -> list[float]:
        """One probability in [0, 1] per text, in order: how likely the text states the answer to
        `question`. Empty `texts` gives []. Deterministic for the same inputs. Raises ReaderError
        when the model cannot score."""


def bounded(question: str, texts: Sequence[str]) -> tuple[str, list[str]]:
    """The question and texts as every backend reads them: cut to their size bounds."""
    if len(texts) > MAX_TEXTS:
        raise ReaderError(f"at most {MAX_TEXTS} texts per call, got {len(texts)}", code="too_many_texts")
    return question[:MAX_QUESTION_CHARS], [str(t)[:MAX_TEXT_CHARS] for t in texts]
