"""The answer's generator, chosen by `answer.generator`: the extractive one (extractive.py) or a model
backend (citadel/generation/backends.py)."""

from __future__ import annotations

import os

from citadel.answer.extractive import ExtractiveGenerator
from citadel.generation.backends import LocalLLMGenerator, OpenAICompatibleGenerator
from citadel.generation.base import Generator


def make_generator(config, reader=None) -> Generator:
    """The generator named by an AnswerConfig (the root CitadelConfig is accepted too); `reader`: the
    process's reader, which the extractive generator quotes by."""
    config = getattr(config, "answer", config)
    if config.generator == "extractive":
        return ExtractiveGenerator(config.extractive_max_sentences, reader)
    if config.generator == "local_llm":
        return LocalLLMGenerator(config.max_new_tokens)
    if config.generator == "openai_compatible":
        return OpenAICompatibleGenerator(config.openai_base_url, config.openai_model,
                                         os.environ.get(config.openai_api_key_env), config.openai_timeout_s,
                                         config.max_new_tokens)
    raise ValueError(f"unknown generator {config.generator!r}")
