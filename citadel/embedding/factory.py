"""Choose the embedder from config."""

from __future__ import annotations

from citadel.config import EmbeddingConfig
from citadel.embedding.base import Embedder


def make_embedder(config: EmbeddingConfig) -> Embedder:
    if config.backend == "hash":
        from citadel.embedding.fake import HashEmbedder

        return HashEmbedder(dim=config.dim)
    from citadel.embedding.minilm import MiniLMEmbedder

    return MiniLMEmbedder(batch_size=config.batch_size, torch_threads=config.torch_threads)
