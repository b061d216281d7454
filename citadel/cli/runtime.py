"""Wires config, catalog, embedder, partitions and retriever together for CLI commands."""

from __future__ import annotations

import sys
from functools import cached_property
from pathlib import Path

from citadel.catalog.sqlite import SQLiteCatalog
from citadel.config import CitadelConfig, load_config


class Runtime:
    def __init__(self, config: CitadelConfig | None = None, config_path: Path | None = None):
        self.config = config or load_config(config_path)

    @cached_property
    def catalog(self) -> SQLiteCatalog:
        return SQLiteCatalog(self.config.catalog_path)

    @cached_property
    def embedder(self):
        from citadel.embedding.factory import make_embedder

        return make_embedder(self.config.embedding)

    @cached_property
    def partitions(self):
        from citadel.retrieval.partitions import PartitionCache

        return PartitionCache(self.catalog, self.config.partitions_dir)

    @cached_property
    def retriever(self):
        from citadel.retrieval.retriever import Retriever

        return Retriever(self.catalog, self.partitions, self.embedder, self.config.retrieval, self.config.index)

    @cached_property
    def answer_service(self):
        from citadel.answer.service import build_answer_service
        from citadel.guardrails import Router
        from citadel.guardrails.planted import PlantedScreen

        return build_answer_service(self.config, self.catalog, self.partitions, self.embedder, router=Router(),
                                    passage_filter=PlantedScreen(self.config.answer.screen_cache_chunks))

    def ingestor(self, progress=None):
        from citadel.ingestion import Ingestor

        return Ingestor(self.catalog, self.embedder, self.config, progress=progress)


def make_progress():
    """Rich progress bars on a terminal, plain log lines otherwise. Returns (callback, context)."""
    if sys.stderr.isatty():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        progress = Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), transient=False)
        tasks: dict[str, int] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = progress.add_task(stage, total=total)
            progress.update(tasks[stage], completed=done, total=total)

        return update, progress

    from contextlib import nullcontext

    last: dict[str, int] = {}

    def log(stage: str, done: int, total: int) -> None:
        step = max(1, total // 10)
        if done == total or done - last.get(stage, 0) >= step:
            last[stage] = done
            print(f"[{stage}] {done}/{total}", file=sys.stderr, flush=True)

    return log, nullcontext()


def tenant_option(value: str | None) -> str | None:
    """The `--tenant` callback of every command: an invalid tenant id is a usage error (exit 2)
    before a catalog, a directory or a job is touched."""
    import typer

    from citadel.errors import InvalidTenant
    from citadel.types import validate_tenant_id

    if value is None:
        return None
    try:
        return validate_tenant_id(value)
    except InvalidTenant as error:
        raise typer.BadParameter(str(error)) from None
