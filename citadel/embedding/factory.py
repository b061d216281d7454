"""Choose the embedder from config."""

from __future__ import annotations

import functools

from citadel.config import EmbeddingConfig
from citadel.embedding.base import Embedder, TokenCounter


def make_embedder(config: EmbeddingConfig, *, device: str = "cpu", fp16: bool = False,
                  torch_threads: int | None = None) -> Embedder:
    """The configured embedder. `device`/`fp16` place the real model on a GPU; `torch_threads`
    overrides the config's CPU thread count (an actor sized for its share of the machine)."""
    if config.backend == "hash":
        from citadel.embedding.fake import HashEmbedder

        return HashEmbedder(dim=config.dim)
    from citadel.embedding.minilm import MiniLMEmbedder

    return MiniLMEmbedder(batch_size=config.batch_size, torch_threads=torch_threads or config.torch_threads,
                          device=device, fp16=fp16)


def embedder_identity(config: EmbeddingConfig) -> tuple[str, int]:
    """(model id, dimension) of the configured embedder without loading it (a driver that only
    records them in segment manifests must not load a model its workers already hold)."""
    if config.backend == "hash":
        from citadel.embedding.fake import HashEmbedder

        return HashEmbedder.model_id, config.dim
    from citadel.embedding.minilm import MODEL_DIM, MODEL_ID

    return MODEL_ID, MODEL_DIM


def make_token_counter(config: EmbeddingConfig) -> TokenCounter:
    """The configured embedder's token counting and window, without loading its model: chunking in
    a parse worker (in-process or on Ray Data) measures exactly as the embedder will read."""
    return _token_counter(config.backend)


@functools.lru_cache(maxsize=None)
def _token_counter(backend: str) -> TokenCounter:
    """One per process and backend: a tokenizer takes seconds to load and never changes."""
    if backend == "hash":
        from citadel.embedding.fake import HashEmbedder

        return HashEmbedder()
    from citadel.embedding.minilm import WordPieceCounter

    return WordPieceCounter.load()
