"""Failure drills over HTTP (DESIGN.md §5), against a running Citadel given by its URL.

The scenario catalog:
- hedge.py: retriever replicas, one made ~10x slower through the admin fault API; p50/p99 of
  /v1/retrieve per case and the extra requests hedging costs (read from /metrics).
- breaker.py: the generator slowed mid-run; when its breaker trips, p95 per window of /v1/answer and
  the staged return after the fault is removed.
control.py sets and clears faults and reads metrics; workload.py holds the requests the drills send.
Each scenario takes a URL, an admin token, a metrics token and `headers_for`; starting the cluster
and minting those credentials is the orchestrator's part (benchmarks/drills.py).
"""
