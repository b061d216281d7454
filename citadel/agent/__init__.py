"""The agentic path (DESIGN.md §10): a run's loop, owned by code.

- `plan`: the plan and reflection schemas, parsed and validated in code (`PlanInvalid`);
- `planner`: one `Planner` interface, a deterministic `rules` backend and an `openai_compatible` one;
- `evidence`: what a run has gathered — passages and the coverage of its checklist (conflicts are
  resolved by citadel/answer/conflicts.py, failed checks go to citadel/reviews/);
- `budget`: the per-run token and cost counter;
- `executor`: the `search` tool and the default step executor (the tool registry and the policy
  over every call are citadel/tools/registry.py);
- `orchestrator`: `Orchestrator.drive(run_id, owner)`, the loop with its five stopping rules, resumable
  from the run store, driving its parts: `journal` (records, events, lease), `planning` (plans and
  reflections acted on by code), `steps` (the limits and rounds of parallel steps), `approval_flow`
  (approvals and review tasks), `synthesis` and `delivery` (the answer, then its events);
- `records`: the typed outcomes (`StepOutcome`, `LoopSignal`, `StopReason`) and run records, with
  their stored JSON form.
"""
