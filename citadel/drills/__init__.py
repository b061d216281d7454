"""Failure drills: deliberate, admin-controlled faults injected into serving stages."""

from __future__ import annotations

from citadel.drills.faults import (NO_FAULTS, STAGES, FaultInjector, FaultSpec, FaultStore, InjectedFault,
                                   NullInjector, sample_latency_s)

__all__ = ["NO_FAULTS", "STAGES", "FaultInjector", "FaultSpec", "FaultStore", "InjectedFault", "NullInjector",
           "sample_latency_s"]
