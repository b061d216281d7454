"""`citadel tools list|pause|resume` and `citadel approvals list|decide` (DESIGN.md §10).

Both act on this home's files, as the other operator commands do: the pause switch's SQLite file
(every serving process sees a pause on its next call, no restart) and the approval store. A decision
taken here is the same as one over the API — the policy engine checks an approval or an edit, the run
gets the event — and the decided run is driven to its end in this process, its answer printed. The
reviewer is named by flags, as with `citadel chat`: the operator vouches for who decides.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from citadel.cli.runtime import tenant_option
from citadel.wiring import Wiring

tools_app = typer.Typer(help="Tools: the registry, and pausing a tool or the model.", no_args_is_help=True)
approvals_app = typer.Typer(help="Approvals waiting for a person: list and decide.", no_args_is_help=True)
console = Console()
ConfigOption = typer.Option(None, "--config", help="YAML config (default: CITADEL_CONFIG or built-in defaults).")
EverywhereOption = typer.Option(None, "--tenant", callback=tenant_option,
                                help="The tenant; without it, everywhere.")


def _wiring(config: Optional[Path]) -> Wiring:
    from citadel.config import load_config

    return Wiring(config=load_config(config))


@tools_app.command("list")
def list_tools(config: Optional[Path] = ConfigOption) -> None:
    """The registry's tools with their tier and approver group, and the pauses in force."""
    wiring = _wiring(config)
    console.print("search  T0")
    for spec in wiring.tool_policy.specs() if wiring.tool_policy is not None else ():
        group = f"  approver {spec.approver_group} (limit {dict(spec.approver_limit)})" if spec.approver_group else ""
        bound = "" if spec.name in wiring.agent_tools.names() else "  (no endpoint configured)"
        console.print(f"{spec.name}  {spec.risk_tier}{group}{bound}")
    for pause in wiring.pause_switch.paused():
        console.print(f"[yellow]paused[/yellow] {pause.target} in {pause.tenant_id or 'every tenant'}")


@tools_app.command("pause")
def pause(target: str = typer.Argument(..., help="A tool name, or `model`."), tenant: Optional[str] = EverywhereOption,
          config: Optional[Path] = ConfigOption) -> None:
    """Pause a tool (its calls refuse with tool_paused) or the model (answers become quotes)."""
    _known(_wiring(config), target).pause_switch.pause(tenant, target)
    console.print(f"paused {target} in {tenant or 'every tenant'}")


@tools_app.command("resume")
def resume(target: str = typer.Argument(..., help="A tool name, or `model`."), tenant: Optional[str] = EverywhereOption,
           config: Optional[Path] = ConfigOption) -> None:
    _known(_wiring(config), target).pause_switch.resume(tenant, target)
    console.print(f"resumed {target} in {tenant or 'every tenant'}")


def _known(wiring: Wiring, target: str) -> Wiring:
    from citadel.tools.spec import MODEL_TARGET

    if target != MODEL_TARGET and (wiring.tool_policy is None or wiring.tool_policy.spec(target) is None):
        console.print(f"[red]no tool {target!r} in the registry[/red]")
        raise typer.Exit(2)
    return wiring


def _service(wiring: Wiring):
    from serving.services.approvals import ApprovalsService

    from citadel.quality.candidates import CandidateQueue
    from citadel.state.runs import RunStatus

    owner = f"cli-{uuid.uuid4().hex[:8]}"

    def resume_here(run_id: str) -> None:  # the runs service's `resume`, driven to its end in this process
        wiring.run_store.update(run_id, status=RunStatus.QUEUED)
        wiring.orchestrator.drive(run_id, owner)

    # a decision from the terminal queues its edit or rejection as a candidate test item, as over HTTP
    candidates = CandidateQueue(wiring.catalog, wiring.personal_data)
    return ApprovalsService(wiring.approval_store, wiring.run_store, wiring.tool_policy, resume_here,
                            candidates=candidates)


def _reviewer(tenant: str, user: str, groups: str):
    from citadel.identity.credentials import ServiceIdentity
    from citadel.types import Principal
    from serving.services.access import Caller

    return Caller(ServiceIdentity("cli"), Principal(tenant, user, frozenset(g for g in groups.split(",") if g)))


@approvals_app.command("list")
def list_approvals(tenant: str = typer.Option(..., "--tenant", callback=tenant_option),
                   user: str = typer.Option(..., "--user"), groups: str = typer.Option(..., "--groups"),
                   status: str = typer.Option("pending", "--status"), config: Optional[Path] = ConfigOption) -> None:
    """The approvals this reviewer's groups may decide."""
    found = _service(_wiring(config)).list(_reviewer(tenant, user, groups), status)["approvals"]
    for approval in found:
        console.print(f"{approval['approval_id']}  {approval['tool']}  {json.dumps(approval['proposed_args'])}  "
                      f"requested by {approval['requester']}  [{approval['status']}]")
    if not found:
        console.print("(none)")


@approvals_app.command("decide")
def decide(approval_id: str, decision: str = typer.Option(..., "--decision",
                                                         help="approve | edit_and_approve | reject"),
           edits: str = typer.Option("{}", "--edits", help="JSON object of changed arguments."),
           comment: str = typer.Option("", "--comment"),
           tenant: str = typer.Option(..., "--tenant", callback=tenant_option),
           user: str = typer.Option(..., "--user"), groups: str = typer.Option(..., "--groups"),
           config: Optional[Path] = ConfigOption) -> None:
    """Decide an approval (once); the run then resumes here and its answer is printed."""
    from citadel.errors import CitadelError

    try:
        changed = json.loads(edits)
        wiring = _wiring(config)
        decided = _service(wiring).decide(_reviewer(tenant, user, groups), approval_id, decision, changed, comment)
    except (CitadelError, ValueError) as error:
        console.print(f"[red]{getattr(error, 'code', 'invalid_request')}: {getattr(error, 'message', error)}[/red]")
        raise typer.Exit(1)
    console.print(f"{decided['status']}: {json.dumps(decided['final_args'])}")
    run = wiring.run_store.get(decided["run_id"])
    if run is not None:
        final = [e for e in wiring.run_store.events(run.run_id) if e.type == "final"]
        console.print(f"run {run.run_id}: {run.status}" + (f"\n{final[-1].data['answer']}" if final else ""))
