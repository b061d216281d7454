"""`citadel chat` and `citadel runs ...`: runs on the agentic path from a terminal (DESIGN.md §10).

`chat` is a conversation in this process: each line starts a run, driven here by the orchestrator
while its events are rendered as they are recorded (progress dimmed, tokens as they come, citations,
then the final answer, which is authoritative). The run store is the same one serving uses, so
`citadel runs show RUN` and `citadel runs events RUN --after N` read any run, this process's or a
replica's. The principal comes from the operator's flags, as with `citadel ask`.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from citadel.cli.runtime import tenant_option
from citadel.wiring import Wiring

runs_app = typer.Typer(help="Runs on the agentic path: their state and event logs.", no_args_is_help=True)
console = Console()
ConfigOption = typer.Option(None, "--config", help="YAML config (default: CITADEL_CONFIG or built-in defaults).")
EXIT_WORDS = {"exit", "quit", ":q"}
POLL_S = 0.5


def chat(
    tenant: str = typer.Option(..., "--tenant", callback=tenant_option),
    user: str = typer.Option(..., "--user"),
    groups: str = typer.Option("", "--groups", help="Comma-separated groups of the user."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """An interactive conversation: each message starts a run whose events are shown as they come."""
    from citadel.state.conversations import Conversation
    from citadel.types import Principal

    wiring = Wiring(config_path=config)
    conversation = wiring.conversation_store.create(Conversation(uuid.uuid4().hex, tenant, user))
    member_of = tuple(sorted(g.strip() for g in groups.split(",") if g.strip()))
    principal = Principal(tenant, user, frozenset(member_of))
    console.print(f"[dim]conversation {conversation.conversation_id}; an empty line or 'exit' ends it[/dim]")
    while True:
        try:
            line = console.input("[bold]you>[/bold] ").strip()
        except (EOFError, KeyboardInterrupt):
            break
        if not line or line.lower() in EXIT_WORDS:
            break
        run_id = _start_run(wiring, conversation.conversation_id, tenant, user, member_of, line)
        wiring.conversation_memory.record_question(conversation.conversation_id, principal, line, run_id)
        console.print(f"[dim]run {run_id}[/dim]")
        _follow(wiring, conversation.conversation_id, principal, run_id)


def _start_run(wiring: Wiring, conversation_id: str, tenant: str, user: str, groups: tuple[str, ...],
               question: str) -> str:
    from citadel.state.runs import Run

    run = wiring.run_store.create(Run(uuid.uuid4().hex, tenant, user, conversation_id, question, groups=groups))
    owner = f"cli-{os.getpid()}"
    threading.Thread(target=wiring.orchestrator.drive, args=(run.run_id, owner), name=f"run-{run.run_id[:8]}",
                     daemon=True).start()
    return run.run_id


def _follow(wiring: Wiring, conversation_id: str, principal, run_id: str) -> None:
    """Render the run's events until its final (or error) event, then record the answer turn."""
    from citadel.agent.memory import source_refs
    from citadel.state.runs import TERMINAL_EVENTS, EventType

    after = 0
    while True:
        events = wiring.run_store.wait(run_id, after, POLL_S)
        for event in events:
            after = event.seq
            _render(event)
            if event.type == EventType.FINAL:
                wiring.conversation_memory.record_answer(conversation_id, principal, str(event.data.get("answer", "")),
                                                         source_refs(event.data.get("citations", [])), run_id)
        if any(e.type in TERMINAL_EVENTS for e in events):
            return


def _render(event) -> None:
    data = event.data
    kind = str(event.type)
    if kind == "progress":
        detail = data.get("ask") or data.get("path") or data.get("reason") or data.get("action") or ""
        console.print(f"[dim]· {escape(str(data.get('stage', 'progress')))} {escape(str(detail))}[/dim]")
    elif kind == "token":
        console.print(escape(str(data.get("text", ""))), end="")
    elif kind == "citation":
        console.print(f"\n[dim][{data.get('number', '?')}] {escape(str(data.get('title', '')))} — "
                      f"{escape(str(data.get('heading', '')))}[/dim]", end="")
    elif kind == "final":
        _render_final(data)
        if data.get("stop_reason"):
            missing = "; ".join(str(m) for m in data.get("missing", []))
            console.print(f"[yellow]stopped ({data['stop_reason']}); missing: {escape(missing) or 'nothing named'}"
                          "[/yellow]")
    elif kind == "error":
        console.print(f"[red]error: {escape(str(data.get('message', data)))}[/red]")
    else:
        console.print(f"[dim]{kind}: {escape(json.dumps(data))}[/dim]")


def _render_final(data: dict) -> None:
    """The authoritative answer with its outcome: a not-confirmed reply asserts nothing, and its
    citations are the closest evidence found."""
    from citadel.agent.records import record_outcome
    from citadel.answer.service import NOT_CONFIRMED

    answer = escape(str(data.get("answer", "")))
    console.print()
    if record_outcome(data) == NOT_CONFIRMED:
        console.print(f"[bold]assistant>[/bold] [cyan]not confirmed[/cyan]: {answer}")
        if data.get("citations"):
            console.print("closest evidence:")
        for number, c in enumerate(data.get("citations", []), start=1):
            console.print(f"  [bold][{number}][/bold] {escape(str(c.get('title', '')))} - "
                          f"{escape(str(c.get('heading', '')))} - {escape(str(c.get('source', '')))}")
    elif data.get("refused"):
        reason = escape(str(data.get("reason")))
        console.print(f"[bold]assistant>[/bold] [yellow]refused[/yellow] ({reason}): {answer}")
    else:
        console.print(f"[bold]assistant>[/bold] [green]answered[/green]: {answer}")


@runs_app.command("show")
def show(run_id: str = typer.Argument(...), config: Optional[Path] = ConfigOption) -> None:
    """A run's state (status, path, stop reason, its answer's outcome) and its recorded steps, as JSON."""
    wiring = Wiring(config_path=config)
    run = wiring.run_store.get(run_id)
    if run is None:
        console.print(f"[red]no run {escape(run_id)}[/red]")
        raise typer.Exit(1)
    from citadel.agent.records import run_outcome

    steps = wiring.run_store.steps(run_id)
    print(json.dumps({**run.to_dict(), "outcome": run_outcome(steps), "steps": sorted(steps)}, indent=1))


@runs_app.command("events")
def events(run_id: str = typer.Argument(...), after: int = typer.Option(0, "--after", min=0,
                                                                         help="Only events with a later seq."),
           config: Optional[Path] = ConfigOption) -> None:
    """A run's events after `--after`, one JSON object a line ({seq, type, data})."""
    wiring = Wiring(config_path=config)
    if wiring.run_store.get(run_id) is None:
        console.print(f"[red]no run {escape(run_id)}[/red]")
        raise typer.Exit(1)
    while True:
        page = wiring.run_store.events(run_id, after)
        for event in page:
            print(json.dumps(event.to_dict()))
            after = event.seq
        if not page:
            return
