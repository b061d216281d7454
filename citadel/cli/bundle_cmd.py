"""`citadel bundle show [ID]` and `citadel bundle diff A B`: the config bundles answers name (DESIGN.md §11).

An id is read from `<home>/bundles` (each process that answers keeps its bundle there); `current`
is the bundle of the config given now.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from citadel.wiring import Wiring

bundle_app = typer.Typer(help="Config bundles: what shaped an answer, by id.", no_args_is_help=True)
ConfigOption = typer.Option(None, "--config", help="YAML config file (else CITADEL_CONFIG, then defaults).")


@bundle_app.command("show")
def show(bundle_id: Optional[str] = typer.Argument(None, help="A bundle id (b-…); none: the current config's."),
         config: Optional[Path] = ConfigOption) -> None:
    """Print a bundle and its id (JSON)."""
    bundle = _resolve(Wiring(config_path=config), bundle_id or "current")
    print(json.dumps(bundle.to_dict(), indent=1, sort_keys=True, ensure_ascii=False))


@bundle_app.command("diff")
def diff(a: str = typer.Argument(..., help="A bundle id, or `current`."),
         b: str = typer.Argument(..., help="A bundle id, or `current`."),
         as_json: bool = typer.Option(False, "--json", help="The changes as JSON."),
         config: Optional[Path] = ConfigOption) -> None:
    """What changed from bundle A to bundle B, key by key (old → new)."""
    from citadel.quality.bundle import diff as bundle_diff

    runtime = Wiring(config_path=config)
    old, new = _resolve(runtime, a), _resolve(runtime, b)
    changes = bundle_diff(old, new)
    if as_json:
        print(json.dumps({"from": old.id, "to": new.id,
                          "changes": [{"key": c.key, "old": c.old, "new": c.new} for c in changes]},
                         indent=1, ensure_ascii=False))
        return
    print(f"{old.id} → {new.id}: {len(changes) or 'no'} change{'' if len(changes) == 1 else 's'}")
    for change in changes:
        print(f"  {change.key}: {_shown(change.old)} → {_shown(change.new)}")


def _resolve(runtime: Wiring, bundle_id: str):
    from citadel.quality.bundle_store import CURRENT, BundleStore

    if bundle_id == CURRENT:
        return runtime.bundle  # kept in the store as it is computed
    try:
        return BundleStore.for_home(runtime.config.home).load(bundle_id)
    except KeyError:
        print(f"error: no bundle {bundle_id!r} in {runtime.config.home}/bundles "
              "(ids come from answers, runs and `citadel bundle show`)", file=sys.stderr)
        raise typer.Exit(2)


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
