"""A drill scenario: a load, a fault and what must hold (`loadtests/drills/*.yaml`, the catalog).

The load runs for `before_s + fault_s + after_s`; the fault starts at `before_s` and ends (is cleared,
or its observation window closes) `fault_s` later. Expectations are checked over the whole run, over
the fault window, or from the end of the fault; each one is optional, so a scenario names only the
guarantees it drills.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

CATALOG_DIR = Path(__file__).resolve().parent
MAX_DRILL_S = 30 * 60  # one scenario's load, all phases together
MAX_CONCURRENCY = 200
MAX_UPLOADS = 500


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DrillLoad(_Spec):
    mix: dict[Literal["retrieve", "answer"], float] = Field(default_factory=lambda: {"retrieve": 0.6, "answer": 0.4})
    concurrency: int = Field(4, ge=1, le=MAX_CONCURRENCY)
    before_s: float = Field(10.0, ge=1)
    fault_s: float = Field(20.0, ge=1)
    after_s: float = Field(20.0, ge=1)
    think_s: float = Field(0.0, ge=0, le=60, description="Pause between a worker's requests.")
    client_retries: int = Field(0, ge=0, le=5, description="Immediate client retries of a 5xx (a retry storm).")
    timeout_s: float = Field(30.0, gt=0, le=300)
    top_k: int = Field(8, ge=1, le=50)
    vary_questions: bool = Field(False, description="Make each question new to the answer cache (filler words), "
                                                    "so every answer reaches the generator.")

    @model_validator(mode="after")
    def _bounded(self) -> DrillLoad:
        if self.before_s + self.fault_s + self.after_s > MAX_DRILL_S:
            raise ValueError(f"a drill's load lasts at most {MAX_DRILL_S} s")
        if not self.mix or any(weight < 0 for weight in self.mix.values()) or sum(self.mix.values()) <= 0:
            raise ValueError("mix: non-negative weights, at least one positive")
        return self

    @property
    def total_s(self) -> float:
        return self.before_s + self.fault_s + self.after_s


class DrillFault(_Spec):
    """stage: a fault set through the admin API (`PUT /v1/admin/faults/{stage}`, `spec` as its body) and
    cleared at the window's end; node_kill: the operator's node killer stops node `node`'s raylet;
    dead_letters: `documents` uploads that cannot be parsed, spread over the window."""

    kind: Literal["stage", "node_kill", "dead_letters"]
    stage: str | None = None
    spec: dict = Field(default_factory=dict)
    node: str | None = None
    documents: int = Field(0, ge=0, le=MAX_UPLOADS)
    tenant: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> DrillFault:
        if self.kind == "stage" and not self.stage:
            raise ValueError("a stage fault names its stage")
        if self.kind == "node_kill" and not self.node:
            raise ValueError("a node kill names its node")
        if self.kind == "dead_letters" and self.documents < 1:
            raise ValueError("a dead-letter backlog uploads at least one document")
        return self


class Expected(_Spec):
    """Each set field is one check; see loadtests/drills/verdict.py for how each is measured."""

    max_error_share: float | None = Field(None, ge=0, le=1, description="Unexpected errors over all requests.")
    expected_error_codes: list[str] = Field(default_factory=list, description="Not errors from the fault's start "
                                            "until expected_grace_s after its end.")
    expected_grace_s: float = Field(0.0, ge=0, le=300)
    recovery_s: float | None = Field(None, ge=0, description="From `recovery_from` to the last bad second's end.")
    recovery_from: Literal["fault_start", "fault_end"] = "fault_end"
    slo_p95_ms: float | None = Field(None, gt=0, description="A second whose p95 is over this is bad.")
    fault_statuses: list[int] = Field(default_factory=list, description="Every response in the window is one.")
    max_leaks: int | None = Field(None, ge=0, description="200s with passages inside the window.")
    min_ok_share_in_fault: float | None = Field(None, ge=0, le=1)
    degraded: str | None = Field(None, description="A flag the 200s of `degraded_endpoint` carry in the window.")
    degraded_endpoint: Literal["retrieve", "answer"] = "answer"
    min_degraded_share: float = Field(0.9, ge=0, le=1)
    dead_letter_jobs: bool = Field(False, description="Every upload is accepted and its job ends failed.")
    max_server_retry_share: float | None = Field(None, ge=0, description="Server retries / requests (metrics).")


class DrillScenario(_Spec):
    name: str = Field(..., pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")
    description: str = ""
    seed: int = 0
    settle_s: float = Field(1.0, ge=0, le=30, description="Requests sent this soon after a change are not judged.")
    load: DrillLoad = DrillLoad()
    fault: DrillFault
    expect: Expected = Expected()


def load_scenario(path: Path) -> DrillScenario:
    return DrillScenario.model_validate(yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {})


def catalog(directory: Path = CATALOG_DIR) -> dict[str, Path]:
    """The scenarios by name: every `*.yaml` beside this module."""
    return {path.stem: path for path in sorted(Path(directory).glob("*.yaml"))}


def find_scenario(name_or_path: str, directory: Path = CATALOG_DIR) -> DrillScenario:
    """A catalog name (`replica-kill`) or a path to a scenario file of one's own."""
    known = catalog(directory)
    if name_or_path in known:
        return load_scenario(known[name_or_path])
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return load_scenario(path)
    raise ValueError(f"unknown drill {name_or_path!r}: one of {', '.join(known)} or a scenario file")
