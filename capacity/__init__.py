"""Capacity planner and simulator (DESIGN.md §2): pure sizing, simulation, calibration and plots.
Imports only citadel.* and capacity.*, never a CLI framework (the `citadel capacity` commands are
citadel/cli/capacity_cmd.py).

- `workload`: the typed workload spec (YAML) with documented defaults.
- `sizing`: RAM/SSD per tier, GPUs, replicas, tokens, cost, what runs out first; `build_plan`.
- `reviewers`: the people behind approvals and review tasks: per team volumes, queue wait, and the
  load at which each team's queue grows without bound, beside the machines'.
- `errorbudget`: failed answers allowed, burn rates, the multi-window alert table.
- `retrystorm`: closed forms for retries at every layer, a retry budget, hedging.
- `simulate`: a seeded discrete-event simulator of replicas, faults and those policies.
- `calibrate`: micro-benchmarks whose rates replace the defaults.
- `plots`: PNGs of a plan.
"""
