"""Failure drills over HTTP (DESIGN.md §5), against a running Citadel given by its URL.

The scenario catalog is the `*.yaml` beside this file (scenario.py reads them): each is a load, a
fault and expectations. run.py runs them (`citadel drill run`): traffic.py sends the load, inject.py
sets and ends the fault (admin API, the operator's node killer, an upload backlog), verdict.py judges
the expectations and plot.py draws the timeline. control.py sets and clears faults and reads metrics.

The measured drills of `citadel bench`:
- hedge.py: retriever replicas, one made ~10x slower through the admin fault API; p50/p99 of
  /v1/retrieve per case and the extra requests hedging costs (read from /metrics).
- breaker.py: the generator slowed mid-run; when its breaker trips, p95 per window of /v1/answer and
  the staged return after the fault is removed.
workload.py holds the requests those two send; starting their cluster and minting credentials is
the orchestrator's part (benchmarks/drills.py).
"""
