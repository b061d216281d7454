"""Signals without labels (DESIGN.md §11): what shows a bad answer when nobody labels it.

- **a rephrase**: the same user of the same tenant asks, within a short window, a question close by
  embedding to their previous one — the first answer did not help (`RephraseDetector`);
- **the verifier's verdicts**: claims kept, removed or corrected by the claim verifier (its pass
  rate is the share kept);
- **a low best score**: the question's cosine to its closest top passage (the gate's vector score)
  under a threshold — users ask what the documents barely cover;
- **thumbs-down by reason**: counted where feedback is recorded (serving/services/runs.py).

The answer service hands every answer it logs to `QualitySignals.observe` (a rephrase's marker,
`rephrase_of`, goes into the answer-log entry); `entry_signals` reads the other signals from that same
entry, so the live metrics (serving/services/metrics.py, through a listener) and the weekly report
(`citadel quality report`, citadel/quality/report.py, over the stored log) share one definition.
A signal never fails an answer: anything that goes wrong here costs the signal, not the request.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from citadel.quality.verifier import CORRECTED, KEPT, REMOVED

log = logging.getLogger(__name__)

# The answer-log field naming the request a question rephrases (the answer that did not help).
REPHRASE_OF = "rephrase_of"
VERDICTS = (KEPT, REMOVED, CORRECTED)
DEFAULT_WINDOW_S = 120.0
DEFAULT_MIN_SIMILARITY = 0.55
DEFAULT_MAX_USERS = 10_000


@dataclass
class _LastQuestion:
    request_id: str
    words: str  # a digest of the question's words (to tell a retry from a rephrase)
    vector: np.ndarray | None
    at: float
    text: str | None = None  # kept only while its vector is unknown (it may have to be embedded)


def _words_digest(text: str) -> str:
    return hashlib.sha256(" ".join(text.lower().split()).encode()).hexdigest()


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, dtype=np.float32).reshape(-1), np.asarray(b, dtype=np.float32).reshape(-1)
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / norms if norms else 0.0


class RephraseDetector:
    """Whether a question rephrases the same user's previous one: asked within `window_s` of it, in
    other words (the same words again is a retry or a double submit, not a rephrase), and at least
    `min_similarity` cosine to it by embedding (`embed(text) -> vector`).

    The memory is in-process and bounded: the last question of at most `max_users` (tenant, user)
    pairs, the least recently asking dropped first, and none older than the window (pruned as
    questions arrive); of a question, its vector and a digest of its words, its text only while its
    vector is unknown. One replica sees its own users: two questions of one user that land on two
    replicas are not compared, so the count errs low, never high.
    A question's vector is the caller's when it has one (the retrieval embedded the question
    already); otherwise it is embedded only when there is a previous question to compare it with."""

    def __init__(self, embed: Callable[[str], np.ndarray], window_s: float = DEFAULT_WINDOW_S,
                 min_similarity: float = DEFAULT_MIN_SIMILARITY, max_users: int = DEFAULT_MAX_USERS,
                 clock: Callable[[], float] = time.time):
        if max_users < 1:
            raise ValueError("max_users is at least 1")
        self._embed = embed
        self.window_s = window_s
        self.min_similarity = min_similarity
        self.max_users = max_users
        self._clock = clock
        self._last: OrderedDict[tuple[str, str], _LastQuestion] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.window_s > 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._last)

    def observe(self, tenant: str, user: str, request_id: str, text: str,
                vector: np.ndarray | None = None) -> str | None:
        """Record this question as the user's last; return the request id of the question it
        rephrases, or None."""
        if not self.enabled:
            return None
        now = self._clock()
        key = (tenant, user)
        with self._lock:
            self._forget_before(now - self.window_s)
            previous = self._last.get(key)
        rephrase_of, words = None, _words_digest(text)
        if previous is not None and previous.words != words:
            vector, similarity = self._similarity(previous, text, vector)
            if similarity is not None and similarity >= self.min_similarity:
                rephrase_of = previous.request_id
        with self._lock:
            self._last[key] = _LastQuestion(request_id, words, vector, now, text if vector is None else None)
            self._last.move_to_end(key)
            while len(self._last) > self.max_users:
                self._last.popitem(last=False)
        return rephrase_of

    def _similarity(self, previous: _LastQuestion, text: str,
                    vector: np.ndarray | None) -> tuple[np.ndarray | None, float | None]:
        """(this question's vector, its cosine to the previous one); an embedder that fails costs the
        comparison only."""
        try:
            vector = vector if vector is not None else self._embed(text)
            earlier = previous.vector if previous.vector is not None else self._embed(previous.text or "")
        except Exception as error:  # noqa: BLE001 — a signal never fails the answer
            log.warning("rephrase check skipped: %s", type(error).__name__)
            return vector, None
        return vector, cosine(vector, earlier)

    def _forget_before(self, cutoff: float) -> None:
        """Drop the users whose last question is older than the window. Each question moves its user
        to the end, so the oldest are first (a clock stepping back only delays their turn)."""
        while self._last:
            oldest = next(iter(self._last.values()))
            if oldest.at >= cutoff:
                return
            self._last.popitem(last=False)


# ---------------------------------------------------------------------- one answer's signals
@dataclass(frozen=True)
class AnswerSignals:
    """What one answer says without a label: whether its question rephrased the previous one (and
    which), the verifier's verdicts by kind, and its best score (None: not measured)."""

    tenant: str
    rephrase_of: str | None = None
    verdicts: dict[str, int] = field(default_factory=dict)
    best_score: float | None = None
    low_best_score: bool = False


def verdict_counts(entry: dict[str, Any]) -> dict[str, int]:
    """Claims kept, removed and corrected by the claim verifier, from an answer's log entry (empty when
    it did not run)."""
    verification = entry.get("verification")
    if not isinstance(verification, dict):
        return {}
    return {verdict: int(verification.get(verdict) or 0) for verdict in VERDICTS}


def best_score(entry: dict[str, Any]) -> float | None:
    """The answer's best score: the cosine of its question to the closest top passage, as the gate
    measured it (None: no gate ran, e.g. a cache hit, a run's synthesis, keyword-only retrieval).
    The cosine, rather than a reranker's score, is on one scale whatever reranker is configured."""
    gate = entry.get("gate")
    score = gate.get("vector_score") if isinstance(gate, dict) else None
    return None if score is None else float(score)


def entry_signals(tenant: str, entry: dict[str, Any], low_best_score: float) -> AnswerSignals:
    """The signals of one answer-log entry (live, or read back from the stored log)."""
    score = best_score(entry)
    return AnswerSignals(tenant, entry.get(REPHRASE_OF), verdict_counts(entry), score,
                         score is not None and score < low_best_score)


class QualitySignals:
    """Observes every answer the answer service logs: detects a rephrase, reads the entry's other
    signals, and tells each listener (a serving process's metrics) the answer's `AnswerSignals`."""

    def __init__(self, rephrases: RephraseDetector | None, low_best_score: float):
        self.rephrases = rephrases
        self.low_best_score = low_best_score
        self._listeners: list[Callable[[AnswerSignals], None]] = []

    def add_listener(self, listener: Callable[[AnswerSignals], None]) -> None:
        self._listeners.append(listener)

    def observe(self, tenant: str, user: str, request_id: str, text: str, entry: dict[str, Any],
                vector: np.ndarray | None = None) -> dict[str, Any]:
        """The fields to add to the answer's log entry (`rephrase_of` when it rephrases the user's
        previous question). `text`: what was searched for; `vector`: its embedding when known."""
        marker: dict[str, Any] = {}
        try:
            if self.rephrases is not None:
                previous = self.rephrases.observe(tenant, user, request_id, text, vector)
                if previous is not None:
                    marker[REPHRASE_OF] = previous
            signals = entry_signals(tenant, {**entry, **marker}, self.low_best_score)
            for listener in self._listeners:
                listener(signals)
        except Exception:  # a signal never fails the answer
            log.exception("quality signals of request %s not recorded", request_id)
        return marker
