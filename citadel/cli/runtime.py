"""What the CLI commands share beyond composition (citadel.wiring): progress display, option checks."""

from __future__ import annotations

import sys


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
