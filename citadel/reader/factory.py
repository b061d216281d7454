"""`make_reader`: the Reader an AnswerConfig names (DESIGN.md §6).

`trained` is the project's own cross-encoder; its module imports torch, so it is imported only when
chosen. `openai_compatible` reuses the answer section's model-server settings (the generator's), so a
deployment with a model server configures it once. `fake` is the deterministic word-overlap reader.
"""

from __future__ import annotations

import functools
from pathlib import Path

from citadel.reader.base import Reader


@functools.lru_cache(maxsize=4)
def trained_reader(artefact_dir: Path | None, runtime: str, threads: int | None) -> Reader:
    """One trained reader per artefact and runtime per process: every Wiring of a process (a replica,
    a test session) shares the loaded weights instead of loading its own."""
    from citadel.reader.trained import TrainedReader

    return TrainedReader(artefact_dir=artefact_dir, runtime=runtime, threads=threads)


def make_reader(config) -> Reader:
    """The reader named by `config.reader` (an AnswerConfig; the root CitadelConfig is accepted too)."""
    config = getattr(config, "answer", config)
    if config.reader == "trained":
        return trained_reader(config.reader_artefact, config.reader_runtime, getattr(config, "reader_threads", None))
    if config.reader == "openai_compatible":
        from citadel.reader.judge import OpenAICompatibleReader

        return OpenAICompatibleReader(config.openai_base_url, config.openai_model,
                                      api_key_env=config.openai_api_key_env, timeout_s=config.openai_timeout_s)
    if config.reader == "fake":
        from citadel.reader.fake import FakeReader

        return FakeReader()
    raise ValueError(f"unknown reader {config.reader!r}")
