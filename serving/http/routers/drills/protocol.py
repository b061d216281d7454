"""The drills family's request and response bodies. A fault as stored and returned is
citadel/resilience/faults.py's `FaultSpec` itself."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field

from citadel.resilience.faults import FaultSpec
from serving.http.protocol import RequestBody, ResponseBody


class FaultRequest(RequestBody):
    """A drill's fault on one stage (see citadel/resilience/faults.py FaultSpec for the semantics)."""

    latency_ms: float = Field(0.0, ge=0, description="Added latency (the mean or median for distributions).")
    latency_dist: Literal["fixed", "uniform", "exponential", "lognormal"] = "fixed"
    latency_jitter_ms: float = Field(0.0, ge=0)
    error_rate: float = Field(0.0, ge=0, le=1, description="Share of calls that fail.")
    hang: bool = Field(False, description="Calls wait until the fault is cleared (or max_hang_s).")
    max_hang_s: Optional[float] = Field(None, gt=0)
    replicas: Union[Literal["all"], list[int]] = Field("all", description="Replica ranks affected.")
    kill: bool = Field(False, description="Kill one affected replica (Serve restarts it).")
    kill_nonce: Optional[str] = None


class FaultList(ResponseBody):
    faults: list[FaultSpec] = Field(..., description="The faults in force.")
    stages: list[str] = Field(..., description="The stages this deployment has (where a fault can be set).")


class FaultCleared(ResponseBody):
    stage: str
    cleared: bool
