"""A reader that remembers recent scores, so the stages of one answer that read the same pair (the
confirmation and the extractive quotes read the same sentences) pay for it once."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Sequence

from citadel.reader.base import Reader, bounded

MEMO_CAPACITY = 4_096


class MemoReader:
    def __init__(self, inner: Reader, capacity: int = MEMO_CAPACITY):
        self.inner = inner
        self.capacity = capacity
        self._scores: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    def score(self, question: str, texts: Sequence[str]) -> list[float]:
        question, texts = bounded(question, texts)
        with self._lock:
            known = {t: self._scores[(question, t)] for t in texts if (question, t) in self._scores}
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            fresh = dict(zip(missing, self.inner.score(question, missing)))
            known.update(fresh)
            with self._lock:
                for text, value in fresh.items():
                    self._scores[(question, text)] = value
                    self._scores.move_to_end((question, text))
                while len(self._scores) > self.capacity:
                    self._scores.popitem(last=False)
        return [known[t] for t in texts]
